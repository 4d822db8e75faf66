"""`python -m trainer RUN.yaml [key=value ...]`: one training run alone, with progress on the terminal."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from trainer.vocabulary import OK


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line usage error (exit 2), as every other user mistake here."""

    def error(self, message: str):
        self.exit(2, f"trainer: error: {message} (see `{self.prog} --help`)\n")


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python -m trainer", description="Train one model from a run config.")
    parser.add_argument("config", help="YAML run config (keys of trainer.config.RunConfig); '-' for the defaults")
    parser.add_argument("overrides", nargs="*", default=[], help="dotted overrides, e.g. queue.size=1024 ema.decay=0.9")
    parser.add_argument("--plugin", action="append", default=[], metavar="FILE_OR_MODULE",
                        help="a file (relative to the working directory) or module defining a method of one's own "
                             "(docs: Adding your own method); repeat for several")
    args = parser.parse_args(argv)
    from trainer.config import RunConfig
    from trainer.errors import UserError

    try:
        if args.plugin:
            from trainer.methods.plugins import load_plugins

            load_plugins(args.plugin)
        if "=" in args.config and not os.path.exists(args.config):
            raise UserError(f"{args.config!r} is an override, not a run config: name the config first, or - for the "
                            f"defaults: python -m trainer - {shlex.join([args.config, *args.overrides])}")
        config = RunConfig() if args.config == "-" else RunConfig.from_yaml(args.config)
        config = config.override(args.overrides)
        from trainer.train import train

        def progress(metrics: dict) -> None:
            parts = [f"step {metrics['step']}", f"loss {metrics['loss']:.4f}"]
            if metrics.get("dev_stsb") is not None:
                parts.append(f"STS-B dev {metrics['dev_stsb']:.2f}")
            if metrics.get("eta") is not None:
                parts.append(f"eta {metrics['eta']:.4f}")
            if metrics.get("queue_fill") is not None:
                parts.append(f"queue {metrics['queue_fill']}")
            parts.append(f"{metrics['elapsed_s']:.0f} s")
            print("  ".join(parts), flush=True)

        print(f"training {config.method} on {config.model} (batch {config.resolved().batch_size})", flush=True)
        summary = train(config, report=progress)
        if config.output_dir:
            from trainer.files import write_text_atomic

            write_text_atomic(Path(config.output_dir) / "summary.json", json.dumps(summary.to_json(), indent=2))
    except UserError as exc:
        print(f"trainer: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("trainer: interrupted", file=sys.stderr)
        return 130
    test = summary.test or {}
    print(f"status: {summary.status}" + (f" ({summary.reason})" if summary.reason else ""))
    if test:
        print("test: " + "  ".join(f"{k} {v:.2f}" for k, v in test.items()))
    keys = ("best_step", "best_dev_stsb", "align", "uniform", "mtd", "sentences_per_s", "wall_time_s")
    brief = {k: getattr(summary, k) for k in keys}
    print(json.dumps(brief))
    return 0 if summary.status == OK else 1


if __name__ == "__main__":
    sys.exit(main())
