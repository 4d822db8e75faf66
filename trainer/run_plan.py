"""What a run will do, told from its resolved config without torch: how many optimiser steps, at which steps it
evaluates STS-B dev, which tasks its final evaluation scores, whether each evaluation also scores the seven STS
test tasks, the precision it computes in and whether it compiles its step. The trainer runs by it; the dry run,
the cost estimate and ASHA's time unit read it, so each of these is one rule.

    plan = RunPlan.of(config)                 # a resolved config (RunConfig or its dict); the corpus is counted
                                              # from disk when max_steps is unset (total_steps None: not installed)
    plan = RunPlan.of(config, sentences=n)    # the trainer, with the n sentences it loaded
    plan.total_steps, plan.evaluations        # steps; dev evaluations (every eval_steps and at the last step)
    plan.evaluates_at(step)                   # whether the loop evaluates after `step`
    plan.final_sts, plan.final_transfer       # the final evaluation's tasks, each once, in order
    plan.tracks_test                          # each evaluation also scores the seven STS test tasks
    plan.precision_on("cuda")                 # precision: auto resolved as the method's release runs it
    plan.compiles_on("cuda")                  # (compiled?, why): `compile` resolved (trainer.compiled.CompileRule)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from trainer.compiled import CompileRule
from trainer.data import planned_steps
from trainer.method_rules import method_rules


@dataclass(frozen=True)
class RunPlan:
    method: str
    precision: str  # as the config asks (auto, fp32, bf16, fp16)
    total_steps: int | None  # None: the corpus is not here to count
    eval_steps: int
    final_sts: tuple[str, ...]
    final_transfer: tuple[str, ...]
    tracks_test: bool
    compile: str = "auto"  # as the config asks (auto, on, off)

    @classmethod
    def of(cls, config: Any, sentences: int | None = None) -> RunPlan:
        """The plan of a resolved run config; `sentences`: the corpus's sentences as loaded (else counted)."""
        from trainer.evaluation.sts import split_tasks  # an unknown task name is its UserError

        data: Mapping[str, Any] = config.to_dict() if hasattr(config, "to_dict") else config
        evaluation = data.get("eval") or {}
        total = planned_steps(dict(data), sentences=sentences)
        sts, transfer = split_tasks(evaluation.get("final_tasks"))
        rules = method_rules(data["method"])
        return cls(method=data["method"], precision=str(data.get("precision") or "auto"), total_steps=total,
                   eval_steps=int(evaluation.get("eval_steps") or total or 1), final_sts=tuple(sts),
                   final_transfer=tuple(transfer), tracks_test=rules.tracks_test(data),
                   compile=str(data.get("compile") or "auto"))

    @property
    def evaluations(self) -> int | None:
        """STS-B dev evaluations of a run that takes all its steps: every eval_steps, and at the last step."""
        return math.ceil(self.total_steps / self.eval_steps) if self.total_steps else None

    def evaluates_at(self, step: int) -> bool:
        return step % self.eval_steps == 0 or step == self.total_steps

    def precision_on(self, device_type: str) -> str:
        return method_rules(self.method).precision_on(device_type, self.precision)

    def compiles_on(self, device_type: str) -> tuple[bool, str]:
        return CompileRule(self.compile).decide(device_type, self.total_steps)
