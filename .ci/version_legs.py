"""The pins of a CI version leg, from pyproject.toml's ranges: `lowest` pins each core package at the lower bound
its range allows, `newest` pins nothing (the installer upgrades within the ranges); both hold torch at the
version given (the main leg's build), so that a leg tests the other packages' versions, never a new torch.

    python .ci/version_legs.py lowest|newest TORCH_VERSION   # prints a pip constraints file
    python .ci/version_legs.py versions                      # prints the core packages' installed versions
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

# The packages whose ranges the legs test (the issue that asked for them names these); torch is held.
CORE = ("transformers", "ray", "optuna", "optuna-dashboard", "pandas", "numpy", "scipy", "matplotlib", "pydantic",
        "sentence-transformers", "statsmodels")


def dependencies() -> dict[str, Requirement]:
    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    requirements = [Requirement(text) for text in project["dependencies"]]
    return {requirement.name.lower(): requirement for requirement in requirements}


def lower_bound(requirement: Requirement) -> str:
    """The version a `>=` bound names; a ValueError for a range without one (a leg cannot pin it)."""
    bounds = [spec.version for spec in requirement.specifier if spec.operator == ">="]
    if len(bounds) != 1:
        raise ValueError(f"{requirement}: a lowest-versions leg needs exactly one >= bound")
    return bounds[0]


def constraints(leg: str, torch_version: str) -> list[str]:
    pins = [f"torch=={torch_version}"]
    if leg == "lowest":
        declared = dependencies()
        missing = [name for name in CORE if name not in declared]
        if missing:
            raise ValueError(f"pyproject.toml declares no range for {', '.join(missing)}")
        pins += [f"{name}=={lower_bound(declared[name])}" for name in CORE]
    return pins


def main(argv: list[str]) -> int:
    if argv[:1] == ["versions"]:
        for name in ("torch", *CORE):
            print(f"{name}=={metadata.version(name)}")
        return 0
    if len(argv) != 2 or argv[0] not in ("lowest", "newest"):
        print(__doc__.strip().splitlines()[-2].strip(), file=sys.stderr)
        return 2
    print("\n".join(constraints(argv[0], argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
