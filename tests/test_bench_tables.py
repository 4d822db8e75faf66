"""bench/table.py: a bench script's `--record` rows land in its own table, led by date, commit and machine, and rows
of other fields start a table of their own; every table the benchmarks page includes exists."""

from __future__ import annotations

import importlib.util
import re

from tests.helpers import REPO


def _table_module():
    spec = importlib.util.spec_from_file_location("bench_table", REPO / "bench" / "table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def test_rows_are_appended_under_their_header_and_other_fields_start_a_new_table(tmp_path):
    table = _table_module()
    path = table.record("bench/eval_speed.py", [{"pooler": "avg", "seconds": 40.25}], tables=tmp_path)
    table.record("bench/eval_speed.py", [{"pooler": "cls", "seconds": 41.0}], tables=tmp_path, gpu="NVIDIA H200")
    table.record("bench/eval_speed.py", [{"pooler": "avg", "seconds": 1 / 3, "note": "a|b"}], tables=tmp_path)
    assert path == tmp_path / "eval_speed.md"
    lines = path.read_text().splitlines()
    assert lines[0].startswith("<!-- Written by bench/eval_speed.py --record")
    tables = [i for i, line in enumerate(lines) if line.startswith("| ---")]
    assert len(tables) == 2  # the third row's fields differ: a table of its own
    assert _cells(lines[tables[0] - 1]) == ["date (UTC)", "commit", "machine", "pooler", "seconds"]
    first, second = _cells(lines[tables[0] + 1]), _cells(lines[tables[0] + 2])
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", first[0])
    assert re.fullmatch(r"[0-9a-f]{12}(\+dirty)?", first[1]), first[1]
    assert first[2].endswith(" cores") and second[2].endswith(", NVIDIA H200")
    assert first[3:] == ["avg", "40.25"] and second[3:] == ["cls", "41"]
    assert _cells(lines[tables[1] - 1])[3:] == ["pooler", "seconds", "note"]
    assert lines[tables[1] + 1].endswith("| avg | 0.333333 | a\\|b |")
    assert table.last_header(path.read_text()) == ["date (UTC)", "commit", "machine", "pooler", "seconds", "note"]


def test_nothing_is_written_without_record(tmp_path):
    assert _table_module().record("bench/x.py", [{"a": 1}], wanted=False, tables=tmp_path) is None
    assert not list(tmp_path.iterdir())


def test_every_script_records_and_the_page_includes_every_table():
    scripts = sorted(p for p in (REPO / "bench").glob("*.py") if p.name != "table.py")
    page = (REPO / "docs" / "reference" / "benchmarks.md").read_text()
    results = (REPO / "bench" / "RESULTS.md").read_text()
    for script in scripts:
        source = script.read_text()
        assert "add_record_argument(" in source and "table.record(" in source, script.name
        name = f"bench/tables/{script.stem}.md"
        assert (REPO / name).is_file(), name
        assert f'--8<-- "{name}"' in page, name
        assert f"`{name}`" in results, name
