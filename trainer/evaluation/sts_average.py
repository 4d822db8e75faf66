"""What may be called "the average": the papers' Avg, the mean of the seven STS tasks' 2-decimal test
Spearman figures (STS12-16, STS-B, SICK-R; docs/science/evaluation.md), and nothing else.

A run that evaluates fewer tasks (the quickstart: `eval.final_tasks: [STSBenchmark]`) has no average: its
summary holds each score under the task's own name, no `test.avg`, and `test_label` says what was
evaluated. Summaries written before this rule held `avg` = the mean of whatever tasks ran (for one task,
that task's score); `readable_test` drops such an `avg` for every reader (trials.csv, the Optuna mirror,
the analysis), so an older one-task study never shows its STS-B score as the average.

Light (no torch): the sweep driver and the analysis import it.

    >>> readable_test({"STSBenchmark": 70.1, "avg": 70.1})
    {'STSBenchmark': 70.1}
    >>> sts_test_label(["STSBenchmark"])
    'STS-B test Spearman x100 only (eval.final_tasks): no avg, which needs all seven STS tasks'
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from trainer.vocabulary import STS_TASK_LABELS, STS_TASKS

AVG = "avg"  # the key of the seven-task average in a summary's `test`, trials.csv and the Optuna attributes
SEVEN_TASK_LABEL = ("seven STS tasks (STS12-16, STS-B, SICK-R) test Spearman x100; "
                    "avg = their mean, the papers' Avg")


def covers_seven_tasks(tasks: Iterable[str]) -> bool:
    """Whether `tasks` include all seven STS tasks (the only case with an average)."""
    return set(STS_TASKS) <= set(tasks)


def readable_test(test: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A summary's `test` block as readers take it: `avg` kept only beside all seven task scores."""
    if test is None:
        return None
    scored = [task for task, value in test.items() if value is not None]
    if covers_seven_tasks(scored):
        return dict(test)
    return {name: value for name, value in test.items() if name != AVG}


def seven_task_average(test: Mapping[str, Any] | None) -> Any:
    """The seven-task average of a summary's `test` block, or None when it does not average the seven."""
    return (readable_test(test) or {}).get(AVG)


def sts_test_label(tasks: Iterable[str]) -> str | None:
    """What a run's STS test scores are, for the summary: the seven tasks and their avg, or the named
    tasks alone; None when no STS task was evaluated."""
    tasks = [task for task in STS_TASKS if task in set(tasks)]
    if not tasks:
        return None
    if covers_seven_tasks(tasks):
        return SEVEN_TASK_LABEL
    names = ", ".join(STS_TASK_LABELS[task] for task in tasks)
    return f"{names} test Spearman x100 only (eval.final_tasks): no avg, which needs all seven STS tasks"
