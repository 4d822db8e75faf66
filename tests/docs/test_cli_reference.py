"""docs/reference/cli.md is the `--help` of every `sweep` command as the code prints it now.

The page is generated (scripts/cli_reference.py); these tests fail when a change to sweep/cli.py was not
followed by regenerating it: `python scripts/cli_reference.py`. The second test does not trust the
generator: it runs `sweep --help` as a command, follows every subcommand it lists (and theirs), and
compares each one's output with its section of the page.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

PAGE = REPO / "docs" / "reference" / "cli.md"
GENERATOR = REPO / "scripts" / "cli_reference.py"
REGENERATE = "python scripts/cli_reference.py"
# the width the page is generated at; colour off (Python 3.14's argparse colours help on a terminal)
HELP_ENV = {"COLUMNS": "100", "NO_COLOR": "1", "PYTHON_COLORS": "0"}


def page_sections() -> dict[str, str]:
    """The page's sections: '## sweep run' followed by a ```text block -> {'sweep run': the block's text}."""
    text = PAGE.read_text(encoding="utf-8")
    return {match.group(1): match.group(2)
            for match in re.finditer(r"^## (sweep(?: [\w-]+)*)\n\n```text\n(.*?)\n```$", text, re.S | re.M)}


def sweep_help(words: list[str]) -> str:
    """`sweep WORDS --help`, run as a command (the installed script beside this Python, else -m sweep)."""
    script = Path(sys.executable).with_name("sweep")
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "sweep"]
    env = {**os.environ, **HELP_ENV, "PYTHONPATH": str(REPO)}
    done = subprocess.run([*command, *words, "--help"], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=120)
    assert done.returncode == 0, (words, done.stderr)
    return done.stdout.rstrip("\n")


def listed_subcommands(help_text: str) -> list[str]:
    """The subcommands a help text lists: argparse indents them by 4 under 'positional arguments'."""
    section = help_text.split("positional arguments:", 1)[1].split("\n\n", 1)[0] if "positional arguments:" \
        in help_text else ""
    return re.findall(r"^    ([\w-]+)", section, re.M)


def test_the_page_is_what_the_generator_writes_now():
    done = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert done.returncode == 0, (
        f"docs/reference/cli.md differs from the parser in sweep/cli.py; regenerate it with `{REGENERATE}`\n"
        + done.stdout[-4000:] + done.stderr[-2000:])


def test_every_command_has_its_section_with_the_help_it_prints():
    sections = page_sections()
    assert "sweep" in sections, f"no '## sweep' section in {PAGE}; regenerate it with `{REGENERATE}`"
    seen: list[str] = []
    queue = [["sweep"]]
    while queue:
        words = queue.pop(0)
        name = " ".join(words)
        seen.append(name)
        printed = sweep_help(words[1:])
        assert name in sections, f"`{name}` is missing from {PAGE.name}; regenerate it with `{REGENERATE}`"
        assert sections[name] == printed, f"`{name} --help` differs from {PAGE.name}; regenerate it: `{REGENERATE}`"
        queue += [words + [sub] for sub in listed_subcommands(printed)]
    assert {"sweep run", "sweep data fetch", "sweep analyze"} <= set(seen)  # the walk found the tree
    assert sorted(sections) == sorted(seen), f"sections for commands that no longer exist; run `{REGENERATE}`"


def test_the_subcommand_reader_finds_a_missing_section():
    # the check above reads subcommands off the help text; it must see both one-line and wrapped entries
    help_text = ("usage: sweep [-h] COMMAND ...\n\npositional arguments:\n  COMMAND\n    run       run a study\n"
                 "    dashboard\n              serve optuna-dashboard\n\noptions:\n  -h, --help  show this help\n")
    assert listed_subcommands(help_text) == ["run", "dashboard"]
    assert listed_subcommands("usage: sweep run [-h] study\n\npositional arguments:\n  study  the file\n") == []
