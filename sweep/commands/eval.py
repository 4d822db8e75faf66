"""`sweep eval`: evaluate any HF id, local path or `embedded` on the STS and transfer tasks and print the
tables (or one JSON object). The scoring is trainer.evaluation's (sts and transfer); this is the command's own
part: checking the input before the model loads, choosing the device, and printing the results.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from trainer.data import data_dir as resolve_data_dir
from trainer.errors import UserError
from trainer.evaluation.score_table import format_table
from trainer.evaluation.sts import STSResult, evaluate_sts, load_task, split_tasks
from trainer.evaluation.transfer_data import TRANSFER_MODES, load_transfer_tasks
from trainer.files import json_safe
from trainer.vocabulary import POOLERS, STS_BENCHMARK


def eval_command(model: str, pooler: str = "cls_before_pooler", data_dir: str | None = None,
                 tasks: Sequence[str] | None = None, as_json: bool = False, batch_size: int = 64,
                 device: str = "auto", fast: bool = True, transfer_mode: str = "test",
                 mteb: Sequence[str] | None = None, mteb_dir: str = "mteb-results") -> int:
    """`sweep eval`: evaluate any HF id, local path or `embedded` and print the tables or one JSON object.

    `tasks` mixes STS and transfer task names (`transfer` = all seven transfer tasks); transfer tasks run
    in `transfer_mode` (test or fasttest). `fast=False` (`--hf-forward`) runs the transformers forward
    instead of trainer.evaluation.fast_forward, to check that both give the same figures. `mteb`: MTEB task
    names (trainer.evaluation.mteb_tasks), evaluated through mteb with the same encoder and pooler, its result
    files under `mteb_dir`; given without `tasks`, MTEB alone."""
    if pooler not in POOLERS:
        raise UserError(f"unknown pooler '{pooler}': choose from {', '.join(POOLERS)}")
    if transfer_mode not in TRANSFER_MODES:
        raise UserError(f"unknown --transfer-mode '{transfer_mode}': choose test (the papers' tables) or fasttest")
    sts_tasks, transfer_tasks = ([], []) if mteb and tasks is None else split_tasks(tasks)
    root = resolve_data_dir(data_dir)
    if mteb:  # an unknown or unreachable MTEB task fails before the model loads
        from trainer.evaluation.mteb_tasks import check_tasks

        check_tasks(mteb, root)
    for task in sts_tasks:  # fail on missing/altered data before torch and the model load
        load_task(root, task, "test")
    if sts_tasks:
        load_task(root, STS_BENCHMARK, "dev")
    load_transfer_tasks(root, transfer_tasks)

    from trainer.models import load_encoder, pick_device

    torch_device = pick_device(device)
    encoder_model, tokenizer = load_encoder(model)  # a model that cannot load fails before the evaluator's imports
    from trainer.evaluation import transfer as transfer_eval
    from trainer.evaluation.encoder import SentenceEncoder

    encoder = SentenceEncoder(encoder_model.to(torch_device), tokenizer, pooler, torch_device, batch_size, fast=fast)
    forward = "fast" if encoder.uses_fast_forward() else "transformers"
    result = evaluate_sts(encoder.encode, root, sts_tasks) if sts_tasks else None
    transfer = None
    if transfer_tasks:
        transfer = transfer_eval.evaluate_transfer(encoder.encode, root, transfer_tasks, transfer_mode,
                                                   device=torch_device, progress=not as_json)
    mteb_result = None
    if mteb:
        from trainer.evaluation.mteb_tasks import evaluate_mteb

        mteb_result = evaluate_mteb(encoder.encode, mteb, mteb_dir, root, model_name=Path(model).name or model)
    seconds = sum(part.seconds for part in (result, transfer, mteb_result) if part is not None)
    if as_json:
        out = {"model": model, "pooler": pooler, **(result.to_json() if result else {}),
               **({"sts_details": json_safe(result.details)} if result else {}),
               **(transfer.to_json() if transfer else {}), **(mteb_result.to_json() if mteb_result else {}),
               "forward": forward, "seconds": round(seconds, 1)}
        print(json.dumps(out))
        return 0
    print(f"model: {model}   pooler: {pooler}   data: {root}   forward: {forward}   ({seconds:.1f} s)")
    if result:
        print(format_table(result))
        if result.align is not None:
            print(f"alignment {result.align:.4f}   uniformity {result.uniform:.4f}   "
                  f"(STS-B {align_uniform_label(result)})")
    if transfer:
        print(f"transfer tasks ({transfer.mode} mode, test accuracy; {transfer.seconds:.1f} s)")
        print(format_table(transfer))
    if mteb_result:
        print(f"MTEB tasks (mteb {mteb_result.mteb_version}, main score x100; result files in {mteb_dir}; "
              f"{mteb_result.seconds:.1f} s)")
        for name, score in mteb_result.scores.items():
            print(f"  {name:<24} {score:6.2f}  ({mteb_result.main_scores[name]}, data revision "
                  f"{mteb_result.revisions[name]})")
    return 0


def align_uniform_label(result: STSResult) -> str:
    return (result.align_uniform_split or "").replace("stsb-", "") + " split"
