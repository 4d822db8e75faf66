"""Each bench script's own table of what it measured: bench/tables/<script>.md, one row per measured line.

A script run with `--record` appends its rows there, each led by when (UTC), the code the script started from
(the commit's first 12 hex digits, "+dirty" with uncommitted changes outside bench/tables/) and the machine (CPU
model and cores, and the GPU when the script used one); the columns after those are the script's own JSON fields.
Rows whose fields differ from the last table's start a new table below it, so a script that changes its output
never mixes columns.
bench/RESULTS.md names every table, and the documentation site's benchmarks page includes them.

    parser = argparse.ArgumentParser(); table.add_record_argument(parser); args = parser.parse_args()
    ...
    table.record(__file__, rows, args.record)     # rows: the dicts the script printed as JSON lines
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable

TABLES = Path(__file__).resolve().parent / "tables"
REPO = Path(__file__).resolve().parents[1]
LEAD = ("date (UTC)", "commit", "machine")


def add_record_argument(parser: Any) -> None:
    parser.add_argument("--record", action="store_true",
                        help="append the measured rows to bench/tables/<this script>.md (date, commit, machine first)")


def table_path(script: str | Path, tables: Path = TABLES) -> Path:
    return tables / f"{Path(script).stem}.md"


def record(script: str | Path, rows: Iterable[dict[str, Any]], wanted: bool = True, tables: Path = TABLES,
           gpu: str | None = None) -> Path | None:
    """Append `rows` to the script's table (module docstring); None when `wanted` is false. `gpu`: the GPU's
    name when the script ran on one."""
    rows = list(rows)
    if not wanted or not rows:
        return None
    path = table_path(script, tables)
    path.parent.mkdir(parents=True, exist_ok=True)
    lead = {"date (UTC)": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
            "commit": COMMIT_AT_START, "machine": machine(gpu)}
    text = path.read_text() if path.exists() else (
        f"<!-- Written by bench/{Path(script).name} --record (bench/table.py); one row per measured line. -->\n\n")
    header = last_header(text)
    for row in rows:
        columns = [*LEAD, *row]
        if columns != header:
            text += ("" if text.endswith("\n\n") else "\n") + _line(columns) + _line(["---"] * len(columns))
            header = columns
        text += _line([*lead.values(), *(row[key] for key in row)])
    path.write_text(text)
    print(f"recorded {len(rows)} row(s) in {path.relative_to(REPO) if path.is_relative_to(REPO) else path}",
          file=sys.stderr)
    return path


def last_header(text: str) -> list[str] | None:
    """The column names of the last table in `text` (None when it has none)."""
    lines = text.splitlines()
    for i in range(len(lines) - 1, 0, -1):
        if lines[i].startswith("| ---"):
            return [cell.strip() for cell in lines[i - 1].strip().strip("|").split("|")]
    return None


def _line(cells: Iterable[Any]) -> str:
    return "| " + " | ".join(_cell(value) for value in cells) + " |\n"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def code_commit() -> str:
    """The checkout's commit (12 hex digits), "+dirty" with uncommitted changes outside bench/tables/."""
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "--short=12", "HEAD")
    if commit is None:
        return "no git checkout"
    changes = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)bench/tables")
    return commit + ("+dirty" if changes else "")


def machine(gpu: str | None = None) -> str:
    """The CPU's model and cores, and the GPU when given: "AMD EPYC 9R14, 2 cores" / "..., NVIDIA H200"."""
    from trainer.provenance import cpu_model

    text = f"{cpu_model()}, {os.cpu_count()} cores"
    return f"{text}, {gpu}" if gpu else text


COMMIT_AT_START = code_commit()  # read when the script imports this module: the code it measures
