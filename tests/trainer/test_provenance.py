"""Every summary.json carries what made its numbers (trainer.provenance), each part checked against what the
machine itself says: git, a separate Python, /proc/cpuinfo, sha256 of the files."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import trainer.train as train_mod
from tests.deadlines import scaled
from tests.helpers import REPO
from trainer import provenance as provenance_module
from trainer.config import RunConfig


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True).stdout


def test_a_run_records_the_code_packages_device_and_data_it_used(tiny_model_dir, shared_data_dir, tmp_path):
    config = RunConfig.from_dict({
        "model": str(tiny_model_dir), "method": "simcse", "batch_size": 8, "max_steps": 2, "device": "cpu",
        "data": {"data_dir": str(shared_data_dir), "cache_dir": str(tmp_path / "cache"), "max_sentences": 100,
                 "corpus": "wiki1m_sample"},
        "eval": {"eval_steps": 2, "final_tasks": ["STSBenchmark"]}})
    block = train_mod.train(config).provenance

    code = block["code"]
    assert code["commit"] == git("rev-parse", "HEAD").strip() and code["source"] == "git checkout"
    diff = git("diff", "HEAD", "--binary")
    untracked = git("ls-files", "--others", "--exclude-standard", "--", "trainer", "sweep", "analysis").split()
    assert code["dirty"] is bool(diff or untracked)
    assert code["diff_sha256"] == (hashlib.sha256(diff.encode()).hexdigest() if diff else None)
    assert code["untracked"] == sorted(p for p in untracked if not p.endswith(".pyc"))
    printed = subprocess.run([sys.executable, "-c", "import torch, transformers, numpy; "
                              "print(torch.__version__, transformers.__version__, numpy.__version__)"],
                             capture_output=True, text=True, timeout=scaled(120)).stdout.split()
    packages = block["packages"]
    assert [packages["torch"], packages["transformers"], packages["numpy"]] == printed
    model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name"))
    assert block["device"] == {"type": "cpu", "cpu": model, "cpu_cores": os.cpu_count(), "name": model}
    assert block["precision"] == "fp32" and block["node"] == {"hostname": socket.gethostname()}
    corpus = shared_data_dir / "corpus" / "wiki1m_sample.txt"
    assert block["data"]["corpus"] == {"file": "wiki1m_sample.txt", "from": "manifest",
                                       "sha256": hashlib.sha256(corpus.read_bytes()).hexdigest()}
    lines = [line for line in (REPO / "trainer" / "data_manifest.tsv").read_text().splitlines()
             if line.startswith("senteval/")]
    assert block["data"]["evaluation"] == {"files": 78,
                                           "sha256": hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()}


def code_state_of(root: Path) -> dict:
    """code_state() of `root`/trainer/provenance.py, loaded from that file in a fresh Python (the venv's editable
    install would import this checkout's trainer whatever PYTHONPATH says)."""
    code = ("import importlib.util, json, sys; spec = importlib.util.spec_from_file_location('p', sys.argv[1]); "
            "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module); "
            "print(json.dumps(module.code_state()))")
    out = subprocess.run([sys.executable, "-c", code, str(root / "trainer" / "provenance.py")], cwd=root,
                         capture_output=True, text=True, timeout=scaled(120), check=True).stdout
    return json.loads(out)


def test_an_edited_comment_is_recorded_as_uncommitted_changes_with_their_hash(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=scaled(120))
    head = git("rev-parse", "HEAD", cwd=clone).strip()
    assert code_state_of(clone) == {"version": code_state_of(clone)["version"], "commit": head, "dirty": False,
                                    "diff_sha256": None, "untracked": [], "source": "git checkout", "plugins": {},
                                    "source_sha256": None}
    queue = clone / "trainer" / "queue.py"
    queue.write_text(queue.read_text().replace('"""', '"""An edited comment. ', 1))
    state = code_state_of(clone)
    diff = git("diff", "HEAD", "--binary", cwd=clone)
    assert (state["commit"], state["dirty"]) == (head, True)
    assert state["diff_sha256"] == hashlib.sha256(diff.encode()).hexdigest()
    edited = state["source_sha256"]
    assert edited is not None
    # a file git does not track, under the packages: part of the code that runs, so of its hash
    (clone / "trainer" / "losses" / "mine.py").write_text("LOSS = 1\n")
    untracked = code_state_of(clone)
    assert untracked["untracked"] == ["trainer/losses/mine.py"] and untracked["source_sha256"] != edited
    (clone / "trainer" / "losses" / "mine.py").write_text("LOSS = 2\n")
    second = code_state_of(clone)["source_sha256"]
    assert second not in (edited, untracked["source_sha256"])
    (clone / "notes.txt").write_text("outside the packages\n")  # not code: untracked, it changes nothing
    assert code_state_of(clone)["source_sha256"] == second
    # the same code installed without its checkout: no commit, said so
    copy = tmp_path / "installed"
    shutil.copytree(clone, copy, ignore=shutil.ignore_patterns(".git"))
    assert code_state_of(copy)["source"] == "installed from a package, no checkout"


def test_a_corpus_the_manifest_does_not_list_is_hashed_once_and_cached(tmp_path, monkeypatch):
    corpus = tmp_path / "data" / "my_corpus.txt"
    corpus.parent.mkdir()
    corpus.write_text("one sentence\nanother sentence\n")
    expected = hashlib.sha256(corpus.read_bytes()).hexdigest()
    first = provenance_module.corpus_digest(corpus, tmp_path / "data", tmp_path / "cache")
    assert first == {"file": "my_corpus.txt", "sha256": expected, "from": "computed"}
    assert expected in (tmp_path / "cache" / "sha256.json").read_text()

    def no_hashing(path):
        raise AssertionError("hashed again")

    monkeypatch.setattr("trainer.data.sha256_file", no_hashing)
    assert provenance_module.corpus_digest(corpus, tmp_path / "data", tmp_path / "cache") == first
    corpus.write_text("a changed corpus\n")
    os.utime(corpus, (1, 1))
    monkeypatch.undo()
    changed = provenance_module.corpus_digest(corpus, tmp_path / "data", tmp_path / "cache")
    assert changed["sha256"] == hashlib.sha256(b"a changed corpus\n").hexdigest()


@pytest.mark.parametrize("commit, dirty, shown", [("f" * 40, False, "f" * 12), ("f" * 40, True, "f" * 12 + "+dirty"),
                                                 (None, None, None)])
def test_trials_csv_shows_the_short_commit(commit, dirty, shown):
    from trainer.summary import Summary, trials_csv_row

    summary = Summary(status="ok", best_dev_stsb=70.0, provenance={"code": {"commit": commit, "dirty": dirty}})
    assert trials_csv_row(summary)["commit"] == shown


def test_a_plugins_source_is_part_of_the_code_state(tmp_path):
    """Editing a plugin's loss changes the recorded code state, and a record of the old source is named as another
    code state (what `sweep run` and its dry run report, and `sweep analyze` keeps apart)."""
    from trainer.methods.plugins import load_plugins

    source = ("from trainer.methods import SimCSE, StepOutput\n\n\nclass Traced(SimCSE):\n    name = 'traced'\n"
              "    label = 'Traced'\n\n    def loss(self, ids, mask, position_ids=None):\n"
              "        return StepOutput(ids.float().sum() * {})\n")
    path = tmp_path / "traced.py"
    path.write_text(source.format(1))
    load_plugins([str(path)])
    first = provenance_module.code_state()
    assert first["plugins"][str(path)] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert provenance_module.other_code_state({"code": first}) is None
    path.write_text(source.format(2))  # the loss's maths changed
    load_plugins([str(path)])
    second = provenance_module.code_state()
    assert second["source_sha256"] != first["source_sha256"]
    assert provenance_module.short_commit({"code": second}) != provenance_module.short_commit({"code": first})
    assert provenance_module.other_code_state({"code": first}) == provenance_module.short_commit({"code": first})
