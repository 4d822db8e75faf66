"""tpe with several seeds: the sampler learns from each configuration's mean over its seeds, not from each seed.

Owns: SeedMeans, the Optuna study `<name>.seed-means` (seed_means_name) in the study's storage, beside the study's
own. TPE asks there: one trial per configuration, RUNNING while its seeds run, then told once every seed has
ended for good (trainer.vocabulary.ends_for_good):

    every seed COMPLETE          -> COMPLETE, value = the mean of the seeds' metric values
    else a seed PRUNED, none failed for good -> PRUNED
    else                         -> FAIL (user attr `status`: the first failing seed's)

Its user attrs name the seeds' trial keys (`keys`: seed -> key) and, once told, their values (`values`). A seed
that ended in a way a resume runs again (an error, an interruption) leaves its configuration RUNNING until the
re-run ends: a configuration is complete only when all its seeds are. The study's own Optuna study lists every
seed's run as grid and random studies do (the dashboard shows each), each with user attr `configuration`: the
number of its trial in the seed-means study. A tpe study with one seed needs none of this: each run is its
configuration, asked in the study's own Optuna study.

    means = SeedMeans(spec, storage, distributions)   # created or loaded
    number, params = means.ask()                      # a new configuration
    means.register(number, {seed: key, ...})          # its seeds' trials
    means.seed_ended(key, state, status, value)       # told as each seed ends; tells the configuration when complete
    means.asked()                                     # on resume: the configurations asked before (held)
"""

from __future__ import annotations

from typing import Any

import optuna

from sweep.records.optuna_private import trial_id
from sweep.spec.expand import ask_in_space
from sweep.spec.schema import StudySpec
from trainer.summary import metric_value
from trainer.vocabulary import TrialState, ends_for_good

SEED_MEANS_SUFFIX = ".seed-means"


def seed_means_name(name: str) -> str:
    """The Optuna study the sampler of a tpe study with several seeds learns from."""
    return f"{name}{SEED_MEANS_SUFFIX}"


def uses_seed_means(spec: StudySpec) -> bool:
    """Whether the study's sampler learns from seed means (sweep.spec.search: tpe with several seeds)."""
    return spec.search.uses_seed_means(len(spec.seeds))


class SeedMeans:
    """The seed-means study of one tpe study (module docstring); the driver is its only writer."""

    def __init__(self, spec: StudySpec, storage: Any, distributions: dict[str, Any]):
        self.spec = spec
        self.distributions = distributions
        direction = "maximize" if spec.metric.goal == "maximize" else "minimize"
        self.study = optuna.create_study(study_name=seed_means_name(spec.name), storage=storage, direction=direction,
                                         sampler=optuna.samplers.TPESampler(seed=spec.seeds[0]), load_if_exists=True)
        self.live: dict[int, optuna.Trial] = {}  # configuration number -> its RUNNING trial
        self.keys: dict[int, list[str]] = {}  # configuration number -> its seeds' trial keys
        self.of: dict[str, int] = {}  # trial key -> its configuration's number
        self.ended: dict[str, tuple[str, str | None, float | None]] = {}  # key -> (state, status, value), for good

    def ask(self) -> tuple[int, dict[str, Any]]:
        live = ask_in_space(self.study, self.spec, self.distributions)
        self.live[live.number] = live
        return live.number, dict(live.params)

    def refuse(self, number: int, reason: str, status: str) -> None:
        """An asked configuration that does not run (dropped by the constraints, a duplicate): FAIL with `status`."""
        live = self.live.pop(number)
        live.set_user_attr("status", status)
        live.set_user_attr("reason", reason)
        self.study.tell(live, state=optuna.trial.TrialState.FAIL)

    def register(self, number: int, keys: dict[int, str]) -> None:
        """The configuration `number` runs as these trials (seed -> key)."""
        self.live[number].set_user_attr("keys", {str(seed): key for seed, key in keys.items()})
        self._hold(number, list(keys.values()))

    def _hold(self, number: int, keys: list[str]) -> None:
        self.keys[number] = keys
        for key in keys:
            self.of[key] = number

    def configuration_of(self, key: str) -> int | None:
        return self.of.get(key)

    def seed_ended(self, key: str, state: str, status: str | None, value: float | None) -> None:
        """A seed's trial ended (its Optuna state and trainer status, its metric value when COMPLETE); the
        configuration is told when every seed has ended for good."""
        number = self.of.get(key)
        if number is None or number not in self.live:
            return
        if not ends_for_good(state, status):
            self.ended.pop(key, None)  # it runs again on resume
            return
        self.ended[key] = (state, status, value)
        if all(k in self.ended for k in self.keys[number]):
            self._tell(number)

    def _tell(self, number: int) -> None:
        live = self.live.pop(number)
        results = [self.ended[key] for key in self.keys[number]]
        live.set_user_attr("values", [value for _, _, value in results])
        if all(state == TrialState.COMPLETE and value is not None for state, _, value in results):
            self.study.tell(live, sum(value for _, _, value in results) / len(results))
            return
        failed = [status for state, status, _ in results if state == TrialState.FAIL]
        if not failed and any(state == TrialState.PRUNED for state, _, _ in results):
            self.study.tell(live, state=optuna.trial.TrialState.PRUNED)
            return
        live.set_user_attr("status", failed[0] if failed else "no value")
        self.study.tell(live, state=optuna.trial.TrialState.FAIL)

    # ---- resume ---------------------------------------------------------------------------------
    def asked(self) -> list[tuple[int, dict[str, Any]]]:
        """(number, params) of every configuration asked before (not the refused asks); those still RUNNING are
        held to be told as their seeds end."""
        out = []
        for frozen in self.study.get_trials(deepcopy=False):
            keys = frozen.user_attrs.get("keys")
            if not keys:
                continue
            out.append((frozen.number, dict(frozen.params)))
            self._hold(frozen.number, list(keys.values()))
            if frozen.state == optuna.trial.TrialState.RUNNING:
                self.live[frozen.number] = optuna.Trial(self.study, trial_id(frozen))
        return out

    def tell_ended(self, rows: dict[str, dict[str, Any]], ended: dict[str, dict[str, Any]]) -> None:
        """On resume: every seed that ended before (its trials.csv row and summary), told as if it ended now."""
        for key in [k for k in self.of if k in ended]:
            row, summary = rows[key], ended[key]
            value = metric_value(summary, self.spec.metric.name) if row["state"] == TrialState.COMPLETE else None
            self.seed_ended(key, row["state"], row.get("status") or summary.status, value)
