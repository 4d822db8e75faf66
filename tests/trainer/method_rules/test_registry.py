"""The registry of methods (trainer.method_rules.registry): the built-in methods registered as plugins are, the
names a method may not take, and the entry point group through which an installed package registers its own."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.deadlines import scaled
from tests.helpers import REPO
from trainer.config import RunConfig
from trainer.method_rules import built_in_methods, registered
from trainer.method_rules.registry import ENTRY_POINT_GROUP, RESERVED_NAMES
from trainer.methods import method_class


def test_the_built_in_methods_are_registered_as_plugins_are():
    assert built_in_methods() == ("simcse", "mocose", "gs", "mix")
    for name in built_in_methods():
        entry = registered()[name]
        assert entry.origin == "built in" and entry.rules.name == name and method_class(name).name == name
    assert RESERVED_NAMES == set(RunConfig.model_fields)  # a method's name is its section's key: none of these


def installed_package(root: Path, target: str) -> None:
    """A package installed in `root` (a folder on sys.path): its metadata names `target` in the entry point group."""
    info = root / "installed_methods-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: installed-methods\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\ninstalled = {target}\n")
    (root / "installed_methods.py").write_text(textwrap.dedent("""\
        from trainer.method_rules import MethodDefinition


        class Installed(MethodDefinition):
            name = "installed"
            label = "Installed"
            implementation = "trainer.methods.simcse:SimCSE"
        """))


def run_python(code: str, root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=scaled(120),
                          env={"PYTHONPATH": f"{root}:{REPO}", "PATH": "/usr/bin:/bin"}, cwd=root)


def test_an_installed_package_registers_its_methods_through_the_entry_point_group(tmp_path):
    installed_package(tmp_path, "installed_methods:Installed")
    done = run_python("from trainer.method_rules import method_entry, method_names\n"
                      "print(method_names()[-1], method_entry('installed').origin)", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "installed entry point installed = installed_methods:Installed"


def test_a_broken_entry_point_is_refused_in_one_line(tmp_path):
    installed_package(tmp_path, "installed_methods:Missing")
    done = run_python("from trainer.errors import UserError\nfrom trainer.method_rules import method_names\n"
                      "try:\n    method_names()\nexcept UserError as exc:\n    print(exc)", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(f"entry point installed = installed_methods:Missing ({ENTRY_POINT_GROUP}) "
                                          "failed on import: AttributeError")
