"""The science pages' reading tables name, for each line of a paper, the test that checks the code against it:
every test they name exists, and every method's page has its table."""

from __future__ import annotations

import re

import pytest

from tests.helpers import REPO

SCIENCE = REPO / "docs" / "science"
METHOD_PAGES = ("simcse.md", "mocose.md", "gs-infonce.md", "mixcse.md")
TABLE_HEADING = "## The paper line by line, and the code"
# `test_file.py::test_name` (the file's name, or its path from the repository root), or `::test_name` after one
REFERENCE = re.compile(r"`((?:[\w/]+/)?test_\w+\.py)?::(test_\w+)`")


def named_tests():
    """(page, file, test) for every test a science page names; `::name` refers to the file named before it."""
    found = []
    for page in sorted(SCIENCE.glob("*.md")):
        last = None
        for match in REFERENCE.finditer(page.read_text(encoding="utf-8")):
            last = match.group(1) or last
            found.append((page.name, last, match.group(2)))
    return found


@pytest.mark.parametrize("page", METHOD_PAGES)
def test_every_method_page_has_its_reading_table(page):
    text = (SCIENCE / page).read_text(encoding="utf-8")
    assert TABLE_HEADING in text
    table = text.split(TABLE_HEADING, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| paper |")]
    assert len(rows) >= 8, f"{page}: {len(rows)} rows"
    assert any("(open" in row for row in rows), f"{page}: no row names a choice the text leaves open"


def test_every_test_a_science_page_names_exists():
    references = named_tests()
    assert len(references) >= 40
    missing = []
    for page, file, name in references:
        assert file is not None, f"{page}: ::{name} follows no file"
        candidates = [REPO / file] if "/" in file else list((REPO / "tests").rglob(file))
        if len(candidates) != 1 or not re.search(rf"^def {name}\(", candidates[0].read_text(), re.M):
            missing.append(f"{page}: {file}::{name}")
    assert missing == []
