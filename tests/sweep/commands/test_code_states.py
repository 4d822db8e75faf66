"""The code state a trial ran on (trainer.provenance: its commit and the digest of the source beyond it) as the
dry run, `sweep run` and `sweep analyze` compare it: a finished trial whose recorded source differs from this
checkout's is named, kept and analysed apart; two different edits are never pooled."""

from __future__ import annotations

import json

import pandas as pd

from analysis.load import comparable_groups
from sweep.commands.dry_run import other_code_lines
from sweep.records.resume import other_code_states
from sweep.spec.schema import StudySpec
from trainer.provenance import code_state, short_commit


def summary_with_code(code: dict) -> dict:
    return {"status": "ok", "best_dev_stsb": 80.0, "config": {"method": "simcse"}, "provenance": {"code": code}}


def test_the_dry_run_names_the_finished_trials_of_another_code_state(tmp_path):
    spec = StudySpec.model_validate({"name": "coded", "base": {"model": "embedded"},
                                     "results_dir": str(tmp_path / "results")})
    here = code_state()
    assert here["commit"]  # this checkout's
    other = {**here, "source_sha256": "0" * 64}
    old_record = {key: value for key, value in here.items() if key != "source_sha256"}  # before the digest existed
    for key, code in {"aaaaaaaaaaaa": here, "bbbbbbbbbbbb": other, "cccccccccccc": old_record}.items():
        folder = tmp_path / "results" / "coded" / "trials" / key
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text(json.dumps(summary_with_code(code)))
    states = {"aaaaaaaaaaaa": "COMPLETE", "bbbbbbbbbbbb": "COMPLETE", "cccccccccccc": "COMPLETE"}
    assert other_code_states(spec, list(states)) == {"bbbbbbbbbbbb": here["commit"][:12] + "+00000000"}
    (line,) = other_code_lines(spec, states)
    assert line.startswith(f"1 finished trial ran on another code state ({here['commit'][:12]}+00000000) than this "
                           f"one ({short_commit({'code': here})}): `sweep run` keeps them")
    assert states == {"aaaaaaaaaaaa": "COMPLETE", "bbbbbbbbbbbb": "COMPLETE (other code)",
                      "cccccccccccc": "COMPLETE"}


def test_two_different_edits_are_never_pooled():
    table = pd.DataFrame({"key": list("abcdefg"), "method": ["simcse"] * 7,
                          "commit": ["c0ffee000000+11111111"] * 3 + ["c0ffee000000+22222222"] * 2
                          + ["c0ffee000000", "c0ffee000000+dirty"]})
    groups = comparable_groups(table)
    assert [(g.folder, sorted(g.table["key"])) for g in groups] == [
        ("", ["a", "b", "c"]),
        ("code_c0ffee000000-22222222", ["d", "e"]),
        ("code_committed", ["f", "g"])]  # clean commits (and records before the digest) pooled, as before
    assert groups[1].note.startswith("2 of 7 trials ran on another code state (c0ffee000000+22222222; the others: "
                                     "c0ffee000000+11111111): analysed apart in code_c0ffee000000-22222222/")
