"""sweep.cli's usage errors: one line, exit 2, and the help it points to is the help of the command the mistake is
in, which lists the options that command does take (the advice works when followed literally)."""

from __future__ import annotations

import shlex

import pytest

from sweep.cli import build_parser


def parse(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(argv)
    out, err = capsys.readouterr()
    return stopped.value.code, out, err


@pytest.mark.parametrize("argv, command, known_option", [
    (["run", "study.yaml", "--max-trials", "0"], "sweep run", "--dry-run"),
    (["doctor", "--bogus"], "sweep doctor", "--bench"),
    (["data", "fetch", "--bogus"], "sweep data fetch", "--corpus"),
    (["analyze", "results/x", "--no-such-option"], "sweep analyze", "--formats"),
])
def test_an_unknown_option_points_to_its_commands_help(argv, command, known_option, capsys):
    code, _, err = parse(argv, capsys)
    unknown = " ".join(argv[argv.index(next(a for a in argv if a.startswith("--"))):])
    assert code == 2 and err == f"{command}: error: unrecognized arguments: {unknown} (see `{command} --help`)\n"
    advice = shlex.split(err.split("(see `")[1].split("`")[0])  # followed literally: that command's help
    code, out, _ = parse(advice[1:], capsys)
    assert code == 0 and out.startswith(f"usage: {command}") and known_option in out


def test_the_parsed_arguments_of_a_good_command_are_unchanged(capsys):
    args = build_parser().parse_args(["run", "study.yaml", "--dry-run"])
    assert args.study == "study.yaml" and args.dry_run is True and args.command_parser.prog == "sweep run"


def test_version_names_the_package_version_and_the_commit_of_the_code(capsys):
    import subprocess
    from importlib import metadata

    from tests.helpers import REPO

    code, out, _ = parse(["--version"], capsys)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(REPO), "diff", "HEAD"], capture_output=True, text=True,
                                check=True).stdout)
    state = "uncommitted changes with diff sha256 " if dirty else "clean)"
    assert code == 0 and out.startswith(f"contrastive-sweep {metadata.version('contrastive-sweep')} "
                                        f"(commit {commit[:12]}, {state}"), out


@pytest.mark.parametrize("argv", [["--bogus"], ["--bogus=1", "--other"], ["--bogus", "run", "study.yaml"]])
def test_an_unknown_option_before_any_command_is_named_not_the_missing_command(argv, capsys):
    code, _, err = parse(argv, capsys)
    unknown = " ".join(a for a in argv if a.startswith("--"))
    assert code == 2 and err == f"sweep: error: unrecognized arguments: {unknown} (see `sweep --help`)\n"


def test_a_missing_command_is_still_named_when_no_option_is_unknown(capsys):
    code, _, err = parse([], capsys)
    assert code == 2 and "the following arguments are required: COMMAND" in err
