"""pyproject.toml's version ranges hold what this environment installed: a range that the installed (tested)
versions fall outside of is a range nobody tested, and fails here."""

from __future__ import annotations

from importlib import metadata

import pytest
from packaging.requirements import Requirement

from tests.helpers import REPO


def test_every_installed_dependency_lies_in_its_declared_range():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = [Requirement(text) for text in project["dependencies"]]
    outside = {}
    for requirement in requirements:
        installed = metadata.version(requirement.name)
        if not requirement.specifier.contains(installed, prereleases=True):
            outside[requirement.name] = f"{installed} not in {requirement.specifier}"
    assert len(requirements) > 10 and outside == {}
