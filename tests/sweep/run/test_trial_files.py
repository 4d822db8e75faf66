"""A trial's files reach the driver's folder whole, or not at all (sweep.run.trial_files)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from pathlib import Path

import pytest

from sweep.run import trial_files
from sweep.run.job import TrialJob
from sweep.run.trial_files import TOKEN_FILE, TrialFolderReceiver, output_place, send_trial_folder


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_file_that_arrives_whole_is_moved_into_place(tmp_path):
    receiver = TrialFolderReceiver(str(tmp_path))
    receiver.begin("k1", "a1")
    receiver.chunk("k1", "a1", "model/weights.bin", b"abc", first=True)
    receiver.chunk("k1", "a1", "model/weights.bin", b"def", first=False)
    assert receiver.end_file("k1", "a1", "model/weights.bin", 6, sha(b"abcdef")) is None
    receiver.commit("k1", "a1", ["model/weights.bin"])
    assert (tmp_path / "trials" / "k1" / "model" / "weights.bin").read_bytes() == b"abcdef"
    assert [p.name for p in (tmp_path / "trials" / "k1").iterdir()] == ["model"]  # no incoming folder left


@pytest.mark.parametrize("sent, size, problem", [
    (b"abXdef", 6, "arrived damaged"),  # a flipped byte: same size, other sha256
    (b"abc", 6, "3 of 6 bytes arrived"),  # cut short
])
def test_a_damaged_or_partial_file_is_detected_and_never_used(tmp_path, sent, size, problem):
    trial = tmp_path / "trials" / "k1"
    trial.mkdir(parents=True)
    (trial / "summary.json").write_text("earlier")
    receiver = TrialFolderReceiver(str(tmp_path))
    receiver.begin("k1", "a1")
    receiver.chunk("k1", "a1", "summary.json", sent, first=True)
    assert problem in receiver.end_file("k1", "a1", "summary.json", size, sha(b"abcdef"))
    receiver.discard("k1", "a1")
    assert (trial / "summary.json").read_text() == "earlier"  # what was there is untouched
    assert sorted(p.name for p in trial.iterdir()) == ["summary.json"]


@pytest.mark.parametrize("bad", ["../escape", "/etc/passwd", "a/../../b", ""])
def test_a_sender_cannot_write_outside_the_trial_folder(tmp_path, bad):
    receiver = TrialFolderReceiver(str(tmp_path))
    receiver.begin("k1", "a1")
    with pytest.raises(ValueError):
        receiver.chunk("k1", "a1", bad, b"x", first=True)


def test_a_new_attempt_drops_what_an_earlier_attempt_left_half_sent(tmp_path):
    receiver = TrialFolderReceiver(str(tmp_path))
    receiver.begin("k1", "lost")
    receiver.chunk("k1", "lost", "log.txt", b"half", first=True)
    receiver.begin("k1", "a2")  # the node of "lost" died mid-transfer; the trial ran again
    assert [p.name for p in (tmp_path / "trials" / "k1").iterdir()] == [".incoming-a2"]


def test_a_node_that_sees_the_drivers_folder_writes_in_place(tmp_path, monkeypatch):
    study = tmp_path / "study"
    study.mkdir()
    (study / TOKEN_FILE).write_text("t0k3n\n")
    job = TrialJob(key="k1", seed=1, params={}, config={}, trial_dir=str(study / "trials" / "k1"), cwd=str(tmp_path),
                   train_fn="unused:train", files={"receiver": "r", "token": "t0k3n", "study_dir": str(study)},
                   cpu=1.0, gpu=0.0)
    assert output_place(job) == (study / "trials" / "k1", False)
    # another run's token (or no token file: a node without the driver's disk): a staging folder
    monkeypatch.setenv("SWEEP_STAGING_DIR", str(tmp_path / "staging"))
    job = replace(job, files={**job.files, "token": "other"})
    place, staged = output_place(job)
    assert staged and place.parent.parent == tmp_path / "staging" and place.name.startswith("k1-")
    assert output_place(replace(job, files=None)) == (study / "trials" / "k1", False)  # one machine


@pytest.mark.slow
def test_a_folder_streams_through_ray_in_bounded_chunks(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(trial_files, "CHUNK_BYTES", 1000)  # many chunks, several under way at once
    study = tmp_path / "study"
    staging = tmp_path / "staging" / "k1-x"
    (staging / "model").mkdir(parents=True)
    weights = os.urandom(25_500)
    (staging / "model" / "weights.bin").write_bytes(weights)
    (staging / "empty.txt").write_bytes(b"")
    (staging / "log.txt").write_text("trained\n")
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        _, files = trial_files.start_receiver(study, {}, {})
        outcome = send_trial_folder(files, "k1", staging)
    finally:
        ray.shutdown()
    assert outcome.pop("seconds") >= 0
    assert outcome == {"arrived": True, "files": 3, "bytes": 25_508}
    trial = study / "trials" / "k1"
    assert (trial / "model" / "weights.bin").read_bytes() == weights
    assert (trial / "empty.txt").read_bytes() == b"" and (trial / "log.txt").read_text() == "trained\n"
    assert not staging.exists() and not staging.parent.exists()  # nothing left on the sending node
    assert not list(trial.glob(".incoming-*"))


def test_files_that_cannot_be_sent_stay_on_the_node_and_say_where(tmp_path, monkeypatch):
    staging = tmp_path / "k1-x"
    staging.mkdir()
    (staging / "log.txt").write_text("x")

    class NoRay:
        @staticmethod
        def get_actor(name, namespace=None):
            raise ValueError(f"Failed to look up actor with name '{name}'")

    monkeypatch.setitem(__import__("sys").modules, "ray", NoRay)
    outcome = send_trial_folder({"receiver": "gone"}, "k1", staging)
    assert outcome["arrived"] is False and str(staging) in outcome["problem"]
    assert (staging / "log.txt").exists()


def test_the_weights_column_says_when_files_never_arrived(tmp_path):
    from sweep.records.store import StudyFolder, weights_state
    from trainer.summary import Summary

    folder = StudyFolder(tmp_path)
    lost = Summary(status="error", files={"arrived": False, "from": "gpu2", "lost": True})
    assert weights_state(folder, "k1", lost) == "lost with node gpu2"
    unsent = Summary(status="error", files={"arrived": False, "from": "gpu3"})
    assert weights_state(folder, "k1", unsent) == "not received from gpu3"
    (Path(folder.model_dir("k1"))).mkdir(parents=True)
    assert weights_state(folder, "k1", lost) == "kept"
