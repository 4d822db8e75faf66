"""MTEB through the real mteb package (trainer.evaluation.mteb_tasks): mteb's STSBenchmark task over the STS-B test
split of the SentEval data gives the same Spearman as the tool's own SentEval STS-B on the same embeddings, and
mteb writes its own result files."""

from __future__ import annotations

import json

import pytest

from tests.helpers import needs_mteb
from trainer.evaluation.encoder import SentenceEncoder
from trainer.evaluation.mteb_tasks import evaluate_mteb
from trainer.evaluation.sts import evaluate_sts
from trainer.models import load_encoder

pytestmark = needs_mteb


def cross_check(model_dir, data_dir, out_dir) -> tuple[float, float]:
    """(SentEval's STS-B test Spearman x100, MTEB's local:STSBenchmark main score x100), one encoder, avg pooler;
    each sentence encoded once, so the two differ only in their reading of the data and their scoring."""
    model, tokenizer = load_encoder(str(model_dir))
    encoder = SentenceEncoder(model, tokenizer, pooler="avg")
    cache: dict[str, object] = {}

    def encode(sentences):
        missing = [s for s in dict.fromkeys(sentences) if s not in cache]
        if missing:
            cache.update(zip(missing, encoder.encode(missing)))
        import numpy as np

        return np.stack([cache[s] for s in sentences])

    senteval = evaluate_sts(encode, data_dir, tasks=["STSBenchmark"], align_uniform_split=None)
    mteb = evaluate_mteb(encode, ["local:STSBenchmark"], out_dir, data_dir, model_name="checked")
    files = sorted(p.name for p in out_dir.rglob("*.json"))
    assert "STSBenchmark.json" in files and "model_meta.json" in files, files
    saved = json.loads(next(out_dir.rglob("STSBenchmark.json")).read_text())
    main_score = saved["scores"]["test"][0]["main_score"]  # mteb keeps 6 decimals
    assert main_score == pytest.approx(mteb.scores["local:STSBenchmark"] / 100, abs=1e-6)
    assert mteb.revisions == {"local:STSBenchmark": "senteval-verified"} and mteb.mteb_version
    return 100 * senteval.details["STSBenchmark"]["spearman"]["all"], mteb.scores["local:STSBenchmark"]


def test_mtebs_stsbenchmark_on_the_senteval_split_equals_senteval_for_a_tiny_model(tiny_model_dir, shared_data_dir,
                                                                                   tmp_path):
    senteval, mteb = cross_check(tiny_model_dir, shared_data_dir, tmp_path / "mteb")
    assert mteb == pytest.approx(senteval, abs=1e-9)


@pytest.mark.slow
def test_mtebs_stsbenchmark_on_the_senteval_split_equals_senteval_for_the_embedded_model(embedded_model_dir,
                                                                                       shared_data_dir, tmp_path):
    senteval, mteb = cross_check(embedded_model_dir, shared_data_dir, tmp_path / "mteb")
    print(f"embedded, avg pooler, STS-B test Spearman x100: SentEval {senteval:.6f}, MTEB {mteb:.6f}")
    assert mteb == pytest.approx(senteval, abs=1e-9)
