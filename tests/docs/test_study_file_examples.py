"""The YAML examples of docs/study-file.md are what `sweep.load_study` accepts.

Which fenced ```yaml blocks are whole study files: a block whose YAML is a mapping with both `name` and
`base` (the two keys every study needs) is one, and must load as written (the page's first block, which
shows every key, included). A block without `name` and `base` is a fragment (one key's value) and only has
to be valid YAML.
"""

from __future__ import annotations

import re

import pytest
import yaml

from sweep import load_study
from tests.helpers import REPO

PAGE = REPO / "docs" / "study-file.md"
FENCE = re.compile(r"^(?P<indent>[ \t]*)```ya?ml\b[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.S | re.M)


def yaml_blocks() -> list[tuple[int, str]]:
    """(line number of the fence, the block's text) for each fenced yaml block of the page."""
    text = PAGE.read_text(encoding="utf-8")
    return [(text.count("\n", 0, match.start()) + 1, match.group("body")) for match in FENCE.finditer(text)]


def kind(body: str) -> str:
    data = yaml.safe_load(body)
    if not (isinstance(data, dict) and {"name", "base"} <= set(data)):
        return "fragment"
    return "study"


def test_the_page_has_yaml_examples():
    assert yaml_blocks(), f"no ```yaml block found in {PAGE}: has the page or its fences changed?"


@pytest.mark.parametrize("line,body", yaml_blocks(), ids=[f"line{line}" for line, _ in yaml_blocks()])
def test_each_yaml_example(line, body, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a study's relative results_dir is resolved here, never in the repository
    what = kind(body)  # parses the block: a fragment must be valid YAML too
    if what == "study":
        path = tmp_path / f"study-file-line{line}.yaml"
        path.write_text(body, encoding="utf-8")
        spec = load_study(path)
        assert spec.name == yaml.safe_load(body)["name"]


def test_the_sorting_tells_a_study_from_a_fragment():
    assert kind("name: a\nbase: {model: embedded}\n") == "study"
    assert kind("queue.slices: [all]\n") == "fragment"


def test_every_whole_study_on_the_page_is_loaded():
    assert sum(kind(body) == "study" for _, body in yaml_blocks()) >= 3
