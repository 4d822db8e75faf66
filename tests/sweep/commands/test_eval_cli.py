"""`sweep eval` with bad input: exit code 2 and exactly one line on stderr saying what to do.

Each case is a real subprocess. Every one of them imports torch (a few seconds on a busy machine), so
they are all started at once by one module fixture and each test checks its own result.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deadlines import scaled
from tests.helpers import needs_mteb

TRUNCATED = "senteval/STS/STS12-en-test/STS.input.MSRpar.txt"
ALTERED = "senteval/STS/STS15-en-test/STS.gs.images.txt"


def sweep_cmd() -> list[str]:
    script = Path(sys.executable).with_name("sweep")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "sweep"]


def cli_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SWEEP_DATA_DIR"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(tmp / "hf-home"))
    return env


def copy_senteval(shared: Path, dest: Path) -> Path:
    shutil.copytree(shared / "senteval", dest / "senteval")
    return dest


@pytest.fixture(scope="module")
def cli_errors(tmp_path_factory, shared_data_dir, tiny_model_dir):
    tmp = tmp_path_factory.mktemp("eval-cli")
    truncated = copy_senteval(shared_data_dir, tmp / "truncated")
    path = truncated / TRUNCATED
    path.write_bytes(path.read_bytes()[:-200])
    altered = copy_senteval(shared_data_dir, tmp / "altered")
    path = altered / ALTERED
    data = bytearray(path.read_bytes())
    data[0] = ord("1") if data[0] != ord("1") else ord("2")  # same size, different content
    path.write_bytes(bytes(data))

    model = str(tiny_model_dir)
    shared = str(shared_data_dir)
    cases = {
        "missing_data_dir": ["--model", model, "--data-dir", str(tmp / "no-such-dir")],
        "truncated_file": ["--model", model, "--data-dir", str(truncated)],
        "altered_file": ["--model", model, "--data-dir", str(altered)],
        "unknown_model": ["--model", "no-such-org/no-such-model-xyz", "--data-dir", shared],
        "unknown_pooler": ["--model", model, "--pooler", "bogus", "--data-dir", shared],
        "unknown_task": ["--model", model, "--tasks", "STS12", "STS99", "--data-dir", shared],
        "unknown_mteb_task": ["--model", model, "--mteb", "STSBenchmrk", "--data-dir", shared],
        "uncached_mteb_task": ["--model", model, "--mteb", "BIOSSES", "--data-dir", shared],
    }
    env = cli_env(tmp)
    procs = {
        name: subprocess.Popen(sweep_cmd() + ["eval", "--device", "cpu"] + args, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env, cwd=tmp)
        for name, args in cases.items()
    }
    results = {}
    try:
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=scaled(300))
            results[name] = (proc.returncode, out, err)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    return results


@pytest.mark.parametrize("case, hints", [
    ("missing_data_dir", ["no-such-dir", "does not exist", "sweep data fetch"]),
    ("truncated_file", ["STS.input.MSRpar.txt", "truncated", "sweep data fetch"]),
    ("altered_file", ["STS.gs.images.txt", "sweep data fetch"]),
    ("unknown_model", ["no-such-org/no-such-model-xyz", "pass a local folder"]),
    ("unknown_pooler", ["'bogus'", "choose from", "cls_before_pooler", "avg_first_last"]),
    ("unknown_task", ["'STS99'", "choose from", "SICKRelatedness"]),
    pytest.param("unknown_mteb_task", ["'STSBenchmrk'", "did you mean 'STSBenchmark'"], marks=needs_mteb),
    pytest.param("uncached_mteb_task", ["BIOSSES", "mteb/biosses-sts", "not in the local Hugging Face cache",
                                        "local:STSBenchmark"], marks=needs_mteb),
])
def test_bad_input_is_one_line_and_exit_2(cli_errors, case, hints):
    code, out, err = cli_errors[case]
    assert code == 2, (case, code, err)
    assert "Traceback" not in err
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("sweep: error: ")
    for hint in hints:
        assert hint in lines[0], (hint, lines[0])
    assert out == ""


@pytest.mark.slow
def test_eval_embedded_json(tmp_path, shared_data_dir):
    env = cli_env(tmp_path)
    proc = subprocess.run(
        sweep_cmd() + ["eval", "--model", "embedded", "--json", "--tasks", "STSBenchmark",
                       "--data-dir", str(shared_data_dir)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=scaled(600),
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout
    out = json.loads(lines[0])
    assert set(out) == {"model", "pooler", "STSBenchmark", "sts_details", "align", "uniform", "align_uniform_split",
                        "forward", "seconds"}  # one task: no avg, which is the seven tasks' mean
    assert out["model"] == "embedded" and out["pooler"] == "cls_before_pooler"
    score = out["STSBenchmark"]
    assert isinstance(score, float) and score == round(score, 2)
    assert 50.0 < score < 95.0  # all-MiniLM-L6-v2 is a trained sentence encoder
    assert out["align_uniform_split"] == "stsb-dev"
    assert 0.0 < out["align"] < 2.0 and out["align"] == round(out["align"], 4)
    assert -8.0 < out["uniform"] < 0.0 and out["uniform"] == round(out["uniform"], 4)
    assert out["seconds"] > 0
    assert out["forward"] == ("fast" if _device_is_cpu() else "transformers")
    # the transformers forward gives the same figures (trainer.evaluation.fast_forward is only a faster way)
    proc = subprocess.run(
        sweep_cmd() + ["eval", "--model", "embedded", "--json", "--tasks", "STSBenchmark", "--hf-forward",
                       "--data-dir", str(shared_data_dir)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=scaled(600),
    )
    assert proc.returncode == 0, proc.stderr
    hf = json.loads(proc.stdout.strip().splitlines()[0])
    assert hf["forward"] == "transformers"
    assert (hf["STSBenchmark"], hf["align"], hf["uniform"]) == (out["STSBenchmark"], out["align"], out["uniform"])


def test_eval_json_holds_the_per_subset_sts_details(tiny_model_dir, shared_data_dir, capsys):
    from sweep.commands.eval import eval_command

    assert eval_command(str(tiny_model_dir), pooler="avg", data_dir=str(shared_data_dir), tasks=["STS13"],
                        as_json=True, device="cpu") == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    details = out["sts_details"]["STS13"]
    assert set(details["subsets"]) == {"FNWN", "headlines", "OnWN"}
    assert all(set(s) == {"pearson", "spearman", "n"} for s in details["subsets"].values())
    assert set(details["pearson"]) == set(details["spearman"]) == {"all", "mean", "wmean"}
    assert out["STS13"] == float("%.2f" % (details["spearman"]["all"] * 100))


def _device_is_cpu() -> bool:
    import torch

    return not torch.cuda.is_available()


def test_bad_data_is_reported_before_torch_or_scipy_load(tmp_path):
    """`sweep eval` checks its data before it loads torch, scipy and the model: a wrong --data-dir is one line
    at once, not after seconds of imports."""
    code = ("import sys\nfrom sweep.cli import main\ncode = main(['eval', '--model', 'embedded', '--data-dir', "
            f"{str(tmp_path / 'nowhere')!r}])\n"
            "print(code, sorted(m for m in ('torch', 'scipy', 'transformers') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                            env=cli_env(tmp_path), timeout=scaled(120))
    assert result.stdout.strip() == "2 []", result.stdout + result.stderr
    assert "nowhere does not exist" in result.stderr
