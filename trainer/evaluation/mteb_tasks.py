"""MTEB beside SentEval, through the real `mteb` package (the optional extra `contrastive-sweep[mteb]`).

SentEval's seven STS tasks are what the papers report; MTEB is what sentence-embedding work reports today. Both
score the same encoder: `MTEBEncoder` hands mteb the tool's own `SentenceEncoder` (the trial's pooler), so an
MTEB score and a SentEval score of one model differ only in the task's data and its scoring.

Task names are mteb's (`STSBenchmark`, `SICK-R`, `BIOSSES`, ...), whose data mteb loads from the Hugging Face hub
at a pinned revision, or `local:STSBenchmark`: mteb's STSBenchmark task over the STS-B test split of the SentEval
data this tool installs and verifies, which needs no hub (and is the cross-check of the two scorers). A hub task
whose data is neither in the local Hugging Face cache nor reachable is refused before anything runs
(`check_tasks`), as an uncached model is.

`evaluate_mteb` runs the tasks and returns each task's main score x100 (mteb's `main_score`, for STS tasks the
Spearman correlation of cosine similarities), mteb's version and each task's dataset revision; mteb writes its
own result files under the folder it is given.
"""

from __future__ import annotations

import difflib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from trainer.errors import UserError
from trainer.vocabulary import STS_BENCHMARK

LOCAL_PREFIX = "local:"
LOCAL_TASKS = (f"{LOCAL_PREFIX}{STS_BENCHMARK}",)
INSTALL = "pip install 'contrastive-sweep[mteb]'"


def require_mteb() -> Any:
    """The mteb module; a UserError naming the install command where it is missing."""
    try:
        import mteb
    except ImportError:
        raise UserError(f"MTEB evaluation needs the mteb package: {INSTALL}") from None
    return mteb


@dataclass(frozen=True)
class MTEBResult:
    """Each task's main score x100 (unrounded), and what made it: mteb's version and each task's dataset
    revision."""

    scores: dict[str, float]
    mteb_version: str
    revisions: dict[str, str]
    seconds: float = 0.0
    main_scores: dict[str, str] = field(default_factory=dict)  # the metric behind each score

    def to_json(self) -> dict[str, Any]:
        return {"mteb": dict(self.scores), "mteb_provenance": {"mteb": self.mteb_version,
                                                               "revisions": dict(self.revisions),
                                                               "main_scores": dict(self.main_scores)}}


def local_stsb_task(data_root: str | Path) -> Any:
    """mteb's STSBenchmark task over the STS-B test split of the verified SentEval data (raw sentences, gold
    scores 0-5 as the file has them): no hub needed."""
    from trainer.data import verified_path

    mteb = require_mteb()
    from datasets import Dataset, DatasetDict

    rows = [line.rstrip("\n").split("\t") for line in
            verified_path(Path(data_root), "senteval/STS/STSBenchmark/sts-test.csv").read_text(encoding="utf-8")
            .splitlines()]
    task = mteb.get_task(STS_BENCHMARK)
    task.dataset = DatasetDict({"test": Dataset.from_dict({
        "sentence1": [row[5] for row in rows], "sentence2": [row[6] for row in rows],
        "score": [float(row[4]) for row in rows]})})
    task.data_loaded = True
    return task


def check_tasks(names: Sequence[str], data_root: str | Path | None = None) -> None:
    """Refuse, in one line each, a task mteb does not know (with the closest name) and a hub task whose data is
    neither in the local Hugging Face cache nor reachable, naming how to bring it; nothing is loaded. No names:
    nothing to check (mteb need not be installed)."""
    if not names:
        return
    require_mteb()  # a local task is scored through mteb too
    for name in names:
        if name in LOCAL_TASKS:
            continue
        task = known_task(name)
        dataset = task.metadata.dataset
        if not _cached(dataset["path"], dataset.get("revision")) and not _hub_reachable():
            raise UserError(
                f"eval.mteb: the data of MTEB task {name} ({dataset['path']} at revision {dataset.get('revision')}) "
                "is not in the local Hugging Face cache and the hub cannot be reached; on a machine that reaches "
                f"it run `python -c \"import mteb; mteb.get_task('{name}').load_data()\"` and copy its "
                "~/.cache/huggingface here (or evaluate local:STSBenchmark, which needs no hub)")


def known_task(name: str) -> Any:
    """mteb's task `name`; a UserError naming the closest known name where mteb (or the local tasks) has none."""
    if name.startswith(LOCAL_PREFIX):
        raise UserError(f"eval.mteb: unknown local task {name!r}; the local ones are {', '.join(LOCAL_TASKS)}")
    mteb = require_mteb()
    try:
        return mteb.get_task(name)
    except (KeyError, ValueError):
        known = [task.metadata.name for task in mteb.get_tasks(exclude_superseded=False)]
        close = difflib.get_close_matches(name, known, n=1)
        raise UserError(f"eval.mteb: mteb has no task {name!r}" + (f" (did you mean {close[0]!r}?)" if close
                                                                   else "; `mteb available_tasks` lists them")
                        ) from None


def _cached(repo: str, revision: str | None) -> bool:
    """Whether the dataset repository `repo` (at `revision`, where given) is in the Hugging Face hub cache."""
    from huggingface_hub import scan_cache_dir

    try:
        cache = scan_cache_dir()
    except Exception:  # no cache folder yet
        return False
    return any(entry.repo_type == "dataset" and entry.repo_id == repo
               and (revision is None or any(r.commit_hash == revision for r in entry.revisions))
               for entry in cache.repos)


def _hub_reachable() -> bool:
    from huggingface_hub import constants

    from trainer.models import hub_reachable

    return not constants.is_offline_mode() and hub_reachable()


def mteb_encoder(encode: Callable[[Sequence[str]], np.ndarray], name: str) -> Any:
    """An mteb encoder (cosine similarity) whose embeddings are `encode`'s: the tool's SentenceEncoder."""
    require_mteb()
    from mteb.models.abs_encoder import AbsEncoder
    from mteb.models.model_meta import ModelMeta, ScoringFunction

    class MTEBEncoder(AbsEncoder):
        def __init__(self) -> None:
            self.mteb_model_meta = ModelMeta.create_empty(overwrites={
                "name": f"contrastive-sweep/{name}", "revision": "local",
                "similarity_fn_name": ScoringFunction.COSINE})

        def encode(self, inputs, *, task_metadata, hf_split, hf_subset, prompt_type=None, **kwargs):
            return encode([text for batch in inputs for text in batch["text"]])

    return MTEBEncoder()


def evaluate_mteb(encode: Callable[[Sequence[str]], np.ndarray], names: Sequence[str], output_dir: str | Path,
                  data_root: str | Path | None = None, model_name: str = "model") -> MTEBResult:
    """Run the MTEB tasks `names` on `encode`'s embeddings; mteb's own result files go under `output_dir`."""
    mteb = require_mteb()
    from mteb.cache import ResultCache

    from trainer.data import data_dir

    check_tasks(names, data_root)
    tasks = [local_stsb_task(data_dir(data_root)) if name in LOCAL_TASKS else mteb.get_task(name) for name in names]
    start = time.perf_counter()
    result = mteb.evaluate(mteb_encoder(encode, model_name), tasks=tasks, cache=ResultCache(str(output_dir)),
                           overwrite_strategy="always", show_progress_bar=False)
    by_task = {task_result.task_name: task_result for task_result in result.task_results}
    scores, revisions, main = {}, {}, {}
    for name, task in zip(names, tasks):
        split = task.metadata.eval_splits[0]
        scores[name] = 100.0 * float(by_task[task.metadata.name].get_score(splits=[split]))
        revisions[name] = "senteval-verified" if name in LOCAL_TASKS else str(task.metadata.dataset.get("revision"))
        main[name] = task.metadata.main_score
    return MTEBResult(scores, mteb.__version__, revisions, time.perf_counter() - start, main)


def final_mteb(names: Sequence[str], encode: Callable[[Sequence[str]], np.ndarray], data_root: str | Path,
               out_dir: Path | None, model_name: str) -> MTEBResult | None:
    """A run's MTEB tasks (`eval.mteb`) on its final state: mteb's files in <out_dir>/mteb (a temporary folder
    without an output folder); None without tasks."""
    if not names:
        return None
    if out_dir is not None:
        return evaluate_mteb(encode, names, out_dir / "mteb", data_root, model_name)
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        return evaluate_mteb(encode, names, folder, data_root, model_name)


def summary_parts(result: MTEBResult | None) -> tuple[dict[str, float] | None, dict[str, Any]]:
    """(the summary's `mteb` scores, x100 to 2 decimals as the STS scores; the provenance block's `mteb` entry:
    mteb's version, each task's data revision and main score) of a run's MTEB result; (None, {}) without one."""
    if result is None:
        return None, {}
    return ({name: round(score, 2) for name, score in result.scores.items()},
            {"mteb": {"version": result.mteb_version, "revisions": dict(result.revisions),
                      "main_scores": dict(result.main_scores)}})


def task_samples(names: Sequence[str]) -> dict[str, int | None]:
    """Each task's evaluated samples (pairs, for STS) over its evaluation splits, as mteb's metadata states them
    (None where it states none); local:STSBenchmark's from the SentEval split. What the dry run counts."""
    from trainer.vocabulary import STS_TEST_PAIRS

    sizes: dict[str, int | None] = {}
    for name in names:
        if name in LOCAL_TASKS:
            sizes[name] = STS_TEST_PAIRS[STS_BENCHMARK]
            continue
        metadata = known_task(name).metadata
        counts = [(metadata.n_samples or {}).get(split) for split in metadata.eval_splits]
        sizes[name] = None if None in counts else sum(counts)
    return sizes
