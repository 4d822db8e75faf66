"""trainer.models: loading an encoder by HF id where the Hugging Face hub cannot be reached. The probe
(`hub_reachable`) asks the hub's host once; where no connection opens, loads by HF id read the HF cache alone, so a
cached model loads without huggingface_hub's retries on every file and a model that is not cached fails at once,
naming the cause."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from tests.deadlines import scaled
from tests.helpers import free_port
from trainer import models


@pytest.fixture
def probe(monkeypatch):
    for name in models.PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)  # read from the environment at import
    models.hub_reachable.cache_clear()
    yield lambda: (models.hub_reachable.cache_clear(), models.hub_reachable())[1]
    models.hub_reachable.cache_clear()


def test_the_probe_asks_the_endpoints_host_and_stands_aside_for_a_proxy_or_offline_mode(probe, monkeypatch):
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", f"http://127.0.0.1:{listening.getsockname()[1]}")
        assert probe() is True
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing there
    assert probe() is False
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")  # the proxy decides: no probe
    assert probe() is True
    monkeypatch.delenv("HTTPS_PROXY")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)  # huggingface_hub keeps to its cache
    assert probe() is True


def run_without_hub(code: str, tmp_path, timeout: float) -> tuple[dict, str]:
    """Run `code` in a fresh interpreter whose HF cache is TMP_PATH/hf and whose hub endpoint is a local port
    nothing listens on (no proxy, offline mode off); its last stdout line parsed as JSON, and its stderr."""
    env = {k: v for k, v in os.environ.items()
           if k not in (*models.PROXY_VARIABLES, "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_ENDPOINT=f"http://127.0.0.1:{free_port()}")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


LOAD = """
import json, sys
from trainer.errors import UserError
from trainer.models import check_model, load_encoder
out = {}
check_model("acme/tiny")
model, tokenizer = load_encoder("acme/tiny")
out["loaded"] = type(model).__name__
for name in ("acme/not-cached", "acme/broken"):
    try:
        load_encoder(name)
    except UserError as exc:
        out[name] = str(exc)
print(json.dumps(out))
"""


@pytest.mark.slow
def test_a_cached_model_loads_by_its_hf_id_without_the_hub_and_an_uncached_one_fails_at_once(tmp_path,
                                                                                             tiny_model_dir):
    """huggingface_hub's cache layout, built by hand: models--acme--tiny/refs/main names the snapshot that holds
    the files. The hub's endpoint is a local port nothing listens on, so no network is asked whatever this machine
    has; before the probe, each file was retried there with backoff (the `Retrying in` lines) before the cache."""
    repo = tmp_path / "hf" / "hub" / "models--acme--tiny"
    shutil.copytree(tiny_model_dir, repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    broken = repo.with_name("models--acme--broken")  # in the cache, but its config.json is not JSON
    shutil.copytree(tiny_model_dir, broken / "snapshots" / "0123abcd")
    (broken / "snapshots" / "0123abcd" / "config.json").write_text("{")
    shutil.copytree(repo / "refs", broken / "refs")
    out, stderr = run_without_hub(LOAD, tmp_path, scaled(240))
    assert out["loaded"] == "BertModel"
    assert out["acme/not-cached"] == (
        "cannot load model 'acme/not-cached': the Hugging Face hub cannot be reached from this machine and the model "
        f"is not in its HF cache ({tmp_path / 'hf' / 'hub'}): load it once on a machine with network into that "
        "cache, or pass a local folder or 'embedded'")
    assert out["acme/broken"].startswith("cannot load model 'acme/broken': ")  # its own cause, not "not cached"
    assert "not in its HF cache" not in out["acme/broken"], out["acme/broken"]
    assert "Retrying" not in stderr, stderr


REFUSE = """
import json, sys
from trainer import models
from trainer.errors import UserError
out = {}
for load in (models.check_model, models.load_encoder):
    try:
        load("acme/not-cached")
    except UserError as exc:
        out[load.__name__] = str(exc)
out["imported"] = sorted(name for name in ("transformers", "torch") if name in sys.modules)
print(json.dumps(out))
"""


def test_an_id_neither_cached_nor_reachable_is_refused_before_transformers_and_torch_load(tmp_path):
    """The refusal needs only huggingface_hub's cache lookup: the seconds of importing transformers and torch are
    spent only on a model that can load."""
    out, _ = run_without_hub(REFUSE, tmp_path, scaled(60))
    for load in ("check_model", "load_encoder"):
        assert out[load].startswith("cannot load model 'acme/not-cached': the Hugging Face hub cannot be reached "
                                    "from this machine and the model is not in its HF cache"), out
    assert out["imported"] == [], out
