"""The paper-style score table SimCSE prints (its `print_table`), for STS and transfer results alike.

Torch-free: it reads only a result's `scores` (task -> score x100) and `avg` (None: no average column).

>>> from types import SimpleNamespace
>>> print(format_table(SimpleNamespace(scores={"STS12": 68.4, "STSBenchmark": 76.854}, avg=None)))
+-------+--------------+
| STS12 | STSBenchmark |
+-------+--------------+
| 68.40 |    76.85     |
+-------+--------------+
>>> print(format_table(SimpleNamespace(scores={"MR": 81.2}, avg=81.2)))
+-------+-------+
|   MR  |  Avg. |
+-------+-------+
| 81.20 | 81.20 |
+-------+-------+
"""

from __future__ import annotations

from typing import Protocol


class Scores(Protocol):
    """What a table is made of: trainer.evaluation.sts.STSResult and trainer.evaluation.transfer.TransferResult
    have both."""

    @property
    def scores(self) -> dict[str, float]: ...

    @property
    def avg(self) -> float | None: ...


def format_table(result: Scores) -> str:
    """One header row of task names, one row of scores ("%.2f"); the "Avg." column only when `result.avg` is
    set (an STS result: only when the scores are the seven tasks; a transfer result: always)."""
    average_column = [] if result.avg is None else ["%.2f" % result.avg]
    names = list(result.scores) + ["Avg."] * len(average_column)
    values = ["%.2f" % v for v in result.scores.values()] + average_column
    widths = [max(len(n), len(v)) + 2 for n, v in zip(names, values)]
    rule = "+" + "+".join("-" * w for w in widths) + "+"

    def row(cells):
        return "|" + "|".join(c.center(w) for c, w in zip(cells, widths)) + "|"

    return "\n".join([rule, row(names), rule, row(values), rule])
