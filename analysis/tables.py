"""Per-task score tables like the papers' Table 1 (STS) and Table 2 (transfer), mean ± std over seeds.

Rows are the combinations of the study's declared parameters (`by`; seeds pooled, never two
configurations: analysis.load.grouping_keys); Table 1's columns are STS12..STS16,
STS-B, SICK-R and Avg (test Spearman x100 of the best-dev state), then n (trials); Table 2's are MR, CR,
SUBJ, MPQA, SST-2, TREC, MRPC and Avg (SentEval test accuracy x100, trials that ran the transfer tasks).
A cell is "mean ± std" with the sample std (ddof=1) over seeds, both to 2 decimals; a row with one trial shows the mean
only, and the note under the table says so. The papers' bert-base main results follow as reference rows for
the methods in the study.

A column appears only when some trial has that score: a study that evaluated STS-B test alone (the
quickstart) gets an STS-B column and no Avg, which is the mean of the seven STS tasks only
(trainer.evaluation.sts_average); the note under the table says why.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from analysis import paper_values
from analysis.load import SCORES, TRANSFER_SCORES, swept_parameters
from trainer.evaluation.sts_average import AVG
from trainer.method_rules import method_label
from trainer.summary import MTEB_PREFIX
from trainer.vocabulary import STS_TASK_LABELS, TRANSFER_TASK_LABELS

HEADERS = {**STS_TASK_LABELS, AVG: "Avg"}
TRANSFER_HEADERS = {**TRANSFER_TASK_LABELS, "transfer_avg": "Avg"}


def score_table(table: pd.DataFrame, by: Sequence[str] | None = None,
                scores: Sequence[str] = SCORES) -> pd.DataFrame:
    """Numbers behind the table: the `by` columns, then `<task>_mean` and `<task>_std` per task, then n.

    `scores=TRANSFER_SCORES` gives Table 2's numbers, over the trials that have transfer results."""
    by = swept_parameters(table) if by is None else [c for c in by if c in table.columns]
    transfer = bool(set(scores) & set(TRANSFER_SCORES))
    scores = [s for s in scores if s in table.columns and table[s].notna().any()]
    if not scores:
        raise ValueError("the results have no transfer score columns (MR ... transfer_avg)" if transfer
                         else "the results have no test score columns (STS12 ... avg)")
    if transfer:  # Table 2 covers the trials that ran the transfer tasks
        table = table[table[scores].notna().any(axis=1)]
    if by:
        grouped = table.groupby(by, dropna=False, sort=True)
        out = grouped.size().rename("n").reset_index()
        for score in scores:
            out[f"{score}_mean"] = grouped[score].mean().to_numpy()
            out[f"{score}_std"] = grouped[score].std(ddof=1).to_numpy()
    else:
        out = pd.DataFrame({"n": [len(table)]})
        for score in scores:
            out[f"{score}_mean"] = [table[score].mean()]
            out[f"{score}_std"] = [table[score].std(ddof=1)]
    return out[list(by) + [f"{s}_{k}" for s in scores for k in ("mean", "std")] + ["n"]]


def format_mean_std(mean: float, std: float, digits: int = 2, latex: bool = False) -> str:
    """'76.25 ± 0.41' (or '76.25 $\\pm$ 0.41'); the mean alone when std is missing; '-' when mean is."""
    if mean is None or pd.isna(mean):
        return "-"
    if std is None or pd.isna(std):
        return f"{mean:.{digits}f}"
    sign = " $\\pm$ " if latex else " ± "
    return f"{mean:.{digits}f}{sign}{std:.{digits}f}"


def markdown_table(table: pd.DataFrame, by: Sequence[str] | None = None, paper: bool = True) -> str:
    header, rows = _rows(table, by, paper, latex=False)
    return _markdown(header, rows) + (
        f"Test Spearman x100 of the best STS-B-dev state; cells: {cell_note(table, by)}{no_average_note(table)}.\n")


def transfer_markdown_table(table: pd.DataFrame, by: Sequence[str] | None = None) -> str:
    """Table 2's layout: MR CR SUBJ MPQA SST-2 TREC MRPC Avg, mean ± std over seeds."""
    header, rows = _rows(table, by, paper=False, latex=False, headers=TRANSFER_HEADERS)
    return _markdown(header, rows) + ("SentEval transfer test accuracy x100 (trainer.evaluation.transfer, the trials' "
                                      f"transfer_mode); cells: {cell_note(table, by, TRANSFER_SCORES)}.\n")


def mteb_headers(table: pd.DataFrame) -> dict[str, str]:
    """The MTEB columns some trial has a score in (trainer.summary's `mteb:<task>`) -> the task's name."""
    return {column: column[len(MTEB_PREFIX):] for column in table.columns
            if column.startswith(MTEB_PREFIX) and table[column].notna().any()}


def mteb_markdown_table(table: pd.DataFrame, by: Sequence[str] | None = None) -> str:
    """The MTEB tasks the trials ran (eval.mteb), mean ± std over seeds, one column per task."""
    headers = mteb_headers(table)
    header, rows = _rows(table, by, paper=False, latex=False, headers=headers)
    return _markdown(header, rows) + (
        "MTEB main score x100 (mteb's main_score of each task, with the trials' pooler; each trial's "
        "provenance.mteb names mteb's version and each task's data revision); cells: "
        f"{cell_note(table, by, list(headers))}.\n")


def no_average_note(table: pd.DataFrame) -> str:
    """Why an STS table has no Avg column ("" when it has one)."""
    if AVG in table.columns and table[AVG].notna().any():
        return ""
    return "; no Avg: it is the mean of the seven STS tasks, and these trials did not evaluate all seven"


def cell_note(table: pd.DataFrame, by: Sequence[str] | None = None, scores: Sequence[str] = SCORES) -> str:
    """What a cell holds, from the n of the rows: single runs, mean ± std over k seeds, or both."""
    counts = sorted({int(n) for n in score_table(table, by, scores=scores)["n"]})
    if counts == [1]:
        return "single runs (one seed per row, no std)"
    if len(counts) == 1:
        return f"mean ± std over {counts[0]} seeds (ddof=1)"
    return "mean ± std over seeds (ddof=1; n per row)" + ("; rows with n = 1: the single run" if 1 in counts else "")


def _markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n\n"


def transfer_latex_table(table: pd.DataFrame, by: Sequence[str] | None = None) -> str:
    return latex_table(table, by, paper=False, caption="SentEval transfer test accuracy x100.", label="tab:transfer",
                       headers=TRANSFER_HEADERS)


def latex_table(table: pd.DataFrame, by: Sequence[str] | None = None, paper: bool = True,
                caption: str = "STS test Spearman x100.", label: str = "tab:sts",
                headers: dict[str, str] = HEADERS) -> str:
    header, rows = _rows(table, by, paper, latex=True, headers=headers)
    scores = TRANSFER_SCORES if headers is TRANSFER_HEADERS else SCORES
    note = cell_note(table, by, scores) + ("" if headers is TRANSFER_HEADERS else no_average_note(table))
    note = note.replace("±", "$\\pm$")
    caption = f"{caption} Cells: {note}."
    shown = len(_shown_headers(table, headers))
    align = "l" * (len(header) - shown - 1) + "c" * shown + "r"
    lines = [
        "\\begin{table}[t]",
        "\\centering",
        "\\small",
        f"\\begin{{tabular}}{{{align}}}",
        "\\toprule",
        " & ".join(_latex_escape(h) for h in header) + " \\\\",
        "\\midrule",
    ]
    lines += [" & ".join(row) + " \\\\" for row in rows]
    lines += ["\\bottomrule", "\\end{tabular}", f"\\caption{{{caption}}}", f"\\label{{{label}}}", "\\end{table}"]
    return "\n".join(lines) + "\n"


# ---- internals ----------------------------------------------------------------------------------
def _rows(table: pd.DataFrame, by: Sequence[str] | None, paper: bool, latex: bool,
          headers: dict[str, str] = HEADERS) -> tuple[list[str], list[list[str]]]:
    headers = _shown_headers(table, headers)
    numbers = score_table(table, by, scores=list(headers))
    by_columns = [c for c in numbers.columns if not (c.endswith("_mean") or c.endswith("_std") or c == "n")]
    label_columns = by_columns or ["setting"]
    header = label_columns + list(headers.values()) + ["n"]
    escape = _latex_escape if latex else (lambda text: text)

    rows = []
    for _, record in numbers.iterrows():
        labels = [escape(_format_key(record[c])) for c in by_columns] or ["this study"]
        cells = [format_mean_std(record.get(f"{s}_mean", np.nan), record.get(f"{s}_std", np.nan), latex=latex)
                 for s in headers]
        rows.append(labels + cells + [str(int(record["n"]))])
    if paper:
        methods = table["method"].dropna().unique() if "method" in table.columns else []
        known = [m for m in paper_values.MAIN_RESULTS if m in set(methods)]  # in the papers' order
        for method in known:
            values = paper_values.MAIN_RESULTS[method]
            spread = paper_values.MAIN_RESULTS_STD.get(method, {})
            name = f"{method_label(method)} (paper, bert-base)"
            labels = [escape(name)] + [""] * (len(label_columns) - 1)
            cells = [format_mean_std(values[s], spread.get(s), latex=latex) for s in headers]
            rows.append(labels + cells + [""])
    return header, rows


def _shown_headers(table: pd.DataFrame, headers: dict[str, str]) -> dict[str, str]:
    """The columns some trial has a score for (an STS-B-only study: no STS12 ... and no Avg)."""
    return {score: name for score, name in headers.items() if score in table.columns and table[score].notna().any()}


def _format_key(value: Any) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "default"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return f"{value:g}"
    return str(value)


def _latex_escape(text: str) -> str:
    for char, replacement in (("\\", "\\textbackslash{}"), ("_", "\\_"), ("&", "\\&"), ("%", "\\%"), ("#", "\\#"),
                              ("$", "\\$")):
        text = text.replace(char, replacement)
    return text
