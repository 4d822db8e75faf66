"""`sweep`: the command-line interface, a thin layer over the package's functions.

Every subcommand parses its arguments and calls one function; user mistakes surface as
`trainer.errors.UserError` and are printed as a single line with exit code 2 (no traceback).

A stop signal (SIGINT, SIGTERM, SIGHUP) is handled from the first line of `main`, before anything slow is
imported (sweep.signal_latch): this module imports only the standard library and two light modules.
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import sys

from sweep import signal_latch
from sweep.run.progress import stdout_to_devnull


def _cmd_data_fetch(args: argparse.Namespace) -> int:
    from sweep.commands.fetch import fetch_data

    fetch_data(source=args.source, dest=args.dest, corpus=args.corpus)
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from sweep.commands.eval import eval_command

    return eval_command(
        model=args.model, pooler=args.pooler, data_dir=args.data_dir, tasks=args.tasks,
        as_json=args.json, batch_size=args.batch_size, device=args.device, fast=not args.hf_forward,
        transfer_mode=args.transfer_mode, mteb=args.mteb, mteb_dir=args.mteb_dir,
    )


def _cmd_run(args: argparse.Namespace) -> int:
    from sweep.run.preflight import preflight_paths
    from sweep.spec import load_study
    from sweep.spec.limits import MAX_TRIALS

    spec = load_study(args.study, max_trials=None if args.many_trials else MAX_TRIALS)
    preflight_paths(spec)  # the dry run refuses the folders `sweep run` could not write, before it writes
    signal_latch.honour()  # a stop signal an import swallowed
    if args.dry_run:
        from sweep.commands.dry_run import print_dry_run
        from sweep.records.history import check_same_study

        change = check_same_study(spec, extend=args.extend)  # refused here as `sweep run` would refuse it
        print_dry_run(spec)
        if change is not None:
            print(f"would extend study {spec.name}: {', '.join(change.added + change.changed)}")
        return 0
    if not args.address:  # before Ray is even imported: a study asking for a missing GPU fails in seconds
        from sweep.run.preflight import preflight_resources

        preflight_resources(spec.resources.cpu, spec.resources.gpu)
    estimate = None
    if spec.cost_limit is not None:  # before anything is written: a refused study leaves nothing behind
        from sweep.commands.cost_limit import check_cost_limit, study_estimate, unestimated_line

        estimate = study_estimate(spec)
        check_cost_limit(spec, estimate)
        if estimate.unestimated:
            print(f"note: {unestimated_line(estimate)}", flush=True)
    from sweep.run.runner import run_study

    signal_latch.honour()  # `import ray._raylet` swallows a KeyboardInterrupt (sweep.signal_latch)
    code = run_study(spec, address=args.address, max_concurrent=args.max_concurrent, extend=args.extend,
                     rerun_changed=args.rerun_changed, rebuild_storage=args.rebuild_storage, cost_estimate=estimate)
    if code >= 128:
        # Stopped by a signal, everything recorded and Ray shut down: exit now. Ray's core worker can crash
        # in the interpreter's teardown (SIGSEGV) after a signal came while it was starting.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _cmd_slurm(args: argparse.Namespace) -> int:
    from sweep.commands.slurm import slurm_command

    return slurm_command(args.study, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                         cpus_per_node=args.cpus_per_node, time=args.time, partition=args.partition,
                         account=args.account, margin=args.signal_margin, dry_run=args.dry_run,
                         many_trials=args.many_trials)


def _cmd_export(args: argparse.Namespace) -> int:
    from sweep.commands.export import export_trial, push_to_hub

    dest = export_trial(args.study, args.dest, trial_key=args.trial, best=args.best)
    print(f"exported to {dest} (load it with SentenceTransformer({str(dest)!r}))")
    if args.push_to_hub:
        print(f"pushed to {push_to_hub(dest, args.push_to_hub)}")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from sweep.commands.status import show_status

    return show_status(args.study)


def _cmd_dashboard(args: argparse.Namespace) -> int:
    from sweep.commands.dashboard import serve_dashboard

    return serve_dashboard(args.study, host=args.host, port=args.port)


def _cmd_analyze(args: argparse.Namespace) -> int:
    from sweep.commands.analyze import analyze_command

    return analyze_command(args.target, attach=not args.no_attach, mtd_source=args.mtd, size=args.figure_width,
                           formats=args.formats)


def _cmd_doctor(args: argparse.Namespace) -> int:
    from sweep.commands.doctor import doctor_command

    return doctor_command(bench=args.bench, tiny=args.tiny, json_path=args.json, data_dir=args.data_dir,
                          methods=args.methods, precisions=args.precisions, steps=args.steps,
                          probe=not args.no_probe, compiled=args.compiled)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit 2), like every other user mistake, each pointing to the help of
    the command it is about: an unknown option of `sweep run` to `sweep run --help`, not `sweep --help`."""

    _stray_options: list[str] = []  # the unknown options before the command, from the last parse

    def error(self, message: str):
        if self._stray_options and message.startswith("the following arguments are required"):
            # `sweep --bogus`: argparse would report the missing command, not the option it could not read
            message = f"unrecognized arguments: {' '.join(self._stray_options)}"
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        leading = itertools.takewhile(lambda arg: arg.startswith("-"), args)
        self._stray_options = [arg for arg in leading if arg.split("=")[0] not in self._option_string_actions]
        parsed, extras = super().parse_known_args(args, namespace)
        if not hasattr(parsed, "command_parser"):  # the innermost command's parser, set first, is kept
            parsed.command_parser = self
        return parsed, extras

    def parse_args(self, args=None, namespace=None):
        parsed, extras = self.parse_known_args(args, namespace)
        before_command = [arg for arg in extras if arg in self._stray_options]
        if before_command:  # `sweep --bogus run ...`: an option of no command, so the help that lists commands
            self.error(f"unrecognized arguments: {' '.join(before_command)}")
        if extras:  # argparse would name the top-level parser here, whose help lists commands, not options
            parsed.command_parser.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed


class _Version(argparse.Action):
    """`sweep --version`: the package's version and the git state of the code it runs (trainer.provenance, the
    same record every run writes), read only when asked."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs):
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0,
                         help="print the version and the commit of the code, and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        from trainer.provenance import code_state

        code = code_state()
        if code["commit"] is None:
            where = code["source"]
        else:
            where = f"commit {code['commit'][:12]}, " + (
                f"uncommitted changes with diff sha256 {code['diff_sha256'][:12]}" if code["dirty"] else "clean")
        print(f"contrastive-sweep {code['version'] or 'unknown version'} ({where})")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    from trainer.vocabulary import STS_TASKS, TRANSFER_TASKS  # the trainer package: after the signal handlers

    parser = _Parser(
        prog="sweep",
        description="Sweeps and ablations for unsupervised contrastive sentence embeddings "
        "(SimCSE, MoCoSE, GS-InfoNCE, MixCSE).",
    )
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    data = sub.add_parser("data", help="manage the evaluation data and training corpus")
    data_sub = data.add_subparsers(dest="data_command", required=True, metavar="ACTION", parser_class=_Parser)
    fetch = data_sub.add_parser("fetch", help="install SentEval data and a training corpus into the data directory")
    fetch.add_argument("--from", dest="source", metavar="DIR",
                       help="a local mirror: a folder laid out as a data directory (senteval/, corpus/), such as "
                       "another machine's data directory (default: download the public archives)")
    fetch.add_argument("--dest", metavar="DIR",
                       help="data directory (default: $SWEEP_DATA_DIR or ~/.cache/contrastive-sweep/data)")
    fetch.add_argument("--corpus", choices=["auto", "full", "sample", "none"], default="auto",
                       help="training corpus: full wiki1m (download), the mirror's sample, or none (default: auto = "
                       "the sample from a mirror, the full corpus when downloading)")
    fetch.set_defaults(func=_cmd_data_fetch)

    ev = sub.add_parser("eval", help="evaluate a model on the STS and transfer tasks exactly as SentEval does")
    ev.add_argument("--model", required=True, help="HF model id, local path, or 'embedded'")
    # No argparse `choices`: an unknown pooler is a one-line UserError from eval_command, not a usage dump.
    ev.add_argument("--pooler", default="cls_before_pooler",
                    help="cls, cls_before_pooler (default), avg, avg_first_last or avg_top2")
    ev.add_argument("--data-dir", help="data directory (default: $SWEEP_DATA_DIR or the default data directory)")
    ev.add_argument("--tasks", nargs="+", metavar="TASK",
                    help=f"any mix of {' '.join(STS_TASKS)} (the default seven), {' '.join(TRANSFER_TASKS)}, "
                    "and `transfer` (all seven transfer tasks)")
    ev.add_argument("--transfer-mode", default="test", metavar="MODE",
                    help="transfer classifier settings as SimCSE's evaluation.py: test (default; the papers' "
                    "tables: 10-fold, adam, batch 64) or fasttest (5-fold, rmsprop, batch 128)")
    ev.add_argument("--mteb", nargs="+", metavar="TASK",
                    help="MTEB tasks through the mteb package (contrastive-sweep[mteb]), e.g. STSBenchmark SICK-R, or "
                    "local:STSBenchmark (SentEval's STS-B test split, no hub); alone, without --tasks, MTEB only")
    ev.add_argument("--mteb-dir", default="mteb-results", metavar="DIR",
                    help="where mteb writes its own result files (default: mteb-results)")
    ev.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    ev.add_argument("--batch-size", type=int, default=64)
    ev.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    ev.add_argument("--hf-forward", action="store_true",
                    help="run the transformers forward instead of the faster CPU forward (same figures; a check)")
    ev.set_defaults(func=_cmd_eval)

    run = sub.add_parser("run", help="run (or resume) a study through Ray Tune")
    run.add_argument("study", help="path to the study YAML file")
    run.add_argument("--address", help="address of an existing Ray cluster (default: start Ray locally)")
    run.add_argument("--max-concurrent", type=int, help="at most N trials at once")
    run.add_argument("--dry-run", action="store_true", help="print the trial table and exit without starting Ray")
    run.add_argument("--extend", action="store_true",
                     help="add this spec's trials to the study recorded in results/<name>/ although it differs in more "
                     "than added values or seeds (recorded in study_history.yaml)")
    run.add_argument("--rebuild-storage", action="store_true",
                     help="an unreadable SQLite Optuna storage: keep it aside as optuna.db.damaged-<time> and "
                          "rebuild it from the trials' summary.json (it only mirrors them)")
    run.add_argument("--rerun-changed", action="store_true",
                     help="re-run finished trials whose config now resolves differently (a default changed), "
                          "that an older reading of the papers made, or that ran on another code state (their old "
                          "summary.json kept as *.replaced-*)")
    run.add_argument("--many-trials", action="store_true",
                     help="plan a study of more than 100,000 trials (refused otherwise: planning alone takes minutes)")
    run.set_defaults(func=_cmd_run)

    sl = sub.add_parser("slurm", help="run a study on a Slurm cluster, requeued until it is finished")
    sl.add_argument("study", help="path to the study YAML file")
    sl.add_argument("--nodes", type=int, default=1, help="nodes per allocation (default 1)")
    sl.add_argument("--gpus-per-node", type=int, default=0, help="GPUs per node (default 0)")
    sl.add_argument("--cpus-per-node", type=int, help="CPUs per node (default: Slurm's default)")
    sl.add_argument("--time", default="4:00:00", help="time limit of one allocation, Slurm format (default 4:00:00; "
                    "at least 15 minutes is sensible)")
    sl.add_argument("--partition", help="Slurm partition (default: the cluster's default)")
    sl.add_argument("--account", help="Slurm account")
    sl.add_argument("--signal-margin", type=int, default=180, metavar="SECONDS",
                    help="SIGTERM this many seconds before the time limit (default 180; Slurm may send it up to a "
                    "minute earlier)")
    sl.add_argument("--dry-run", action="store_true", help="print the sbatch script; submit nothing")
    sl.add_argument("--many-trials", action="store_true",
                    help="a study of more than 100,000 trials (passed on to `sweep run`)")
    sl.set_defaults(func=_cmd_slurm)

    ex = sub.add_parser("export",
                        help="write a trial's kept weights as a sentence-transformers folder with a model card")
    ex.add_argument("study", help="study YAML file or its results folder")
    ex.add_argument("dest", help="new (or empty) folder to write")
    ex.add_argument("--trial", metavar="KEY", help="the trial to export (see `sweep status`)")
    ex.add_argument("--best", action="store_true", help="export the trial with the best study metric")
    ex.add_argument("--push-to-hub", metavar="REPO", help="then upload the folder to the Hugging Face Hub repo REPO")
    ex.set_defaults(func=_cmd_export)

    st = sub.add_parser("status", help="show the trials of a study and their states")
    st.add_argument("study", help="study YAML file or its results folder")
    st.set_defaults(func=_cmd_status)

    dash = sub.add_parser("dashboard", help="serve optuna-dashboard on the study's storage")
    dash.add_argument("study", help="study YAML file or its results folder")
    dash.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1: this machine only)")
    dash.add_argument("--port", type=int, default=8080)
    dash.set_defaults(func=_cmd_dashboard)

    doc = sub.add_parser("doctor", help="check this machine (torch, CUDA, GPUs, Ray, Optuna, data, models); "
                         "--bench: a GPU self-check of at most 10 minutes")
    doc.add_argument("--bench", action="store_true",
                     help="also train each method x precision for a few steps on a random bert-base-sized encoder: "
                     "steps/s, sentences/s, peak memory, sync-free steps, fp32-vs-half loss, two trials per GPU")
    doc.add_argument("--tiny", action="store_true",
                     help="bench a tiny encoder instead of bert-base (always so without a GPU)")
    doc.add_argument("--json", metavar="PATH",
                     help="write the checklist (and the bench) as JSON here (default with --bench: the device's "
                     "record, $SWEEP_BENCH_DIR or ~/.cache/contrastive-sweep/bench/<device>.json)")
    doc.add_argument("--data-dir", help="data directory (default: $SWEEP_DATA_DIR or the default data directory)")
    doc.add_argument("--methods", metavar="LIST", help="comma-separated methods to bench (default: all four)")
    doc.add_argument("--precisions", metavar="LIST", help="comma-separated precisions (default: fp32,bf16,fp16)")
    doc.add_argument("--steps", type=int, default=20, help="training steps per bench run (default 20)")
    doc.add_argument("--compiled", action="store_true",
                     help="also run each method x precision with the compiled step (`compile: on`): steps/s, the "
                     "compile's seconds, graphs, the sync check, the loss against the eager run")
    doc.add_argument("--no-probe", action="store_true",
                     help="on the CPU, leave out the size probe (the same runs on a MiniLM-sized encoder, most of "
                     "the CPU bench's time); `sweep run --dry-run` then scales the tiny encoder's times by compute "
                     "per token alone")
    doc.set_defaults(func=_cmd_doctor)

    an = sub.add_parser("analyze", help="draw the figures and tables of a study's results")
    an.add_argument("target", help="results folder, or the study YAML file")
    an.add_argument("--no-attach", action="store_true", help="do not attach figures to the Optuna study")
    an.add_argument("--mtd", choices=["formula", "measured"], default="formula",
                    help="x of the MTD figures: eq. 4's formula (default) or the distance the trainer measured "
                         "(written and attached as <name>_measured.png)")
    an.add_argument("--figure-width", choices=["single", "double"], default="single",
                    help="figure width: one journal column, 3.5 in (default), or two, 7.2 in; PNG at 300 dpi, "
                         "PDF with embedded (Type 42) fonts")
    an.add_argument("--formats", metavar="LIST", default="png,pdf",
                    help="comma-separated files to write each figure as: png, pdf, svg (default png,pdf; the "
                         "plotted data is always written as .csv; only PNGs are attached to the Optuna study)")
    an.set_defaults(func=_cmd_analyze)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status (docs/running/results-and-resume.md, "Exit codes"): 0; 1 (`sweep run`:
    a trial failed or was interrupted; `sweep doctor`: a problem found); 2 (a user error, one line); 3 (`sweep
    run`: Ray could not start or be reached, one line); 4 (`sweep run`: stopped on the study's cost_limit);
    128 + N (signal N; 141 when the output's reader went away)."""
    signal_latch.install()  # first: SIGINT, SIGTERM and SIGHUP alike stop the command from here on
    try:
        from trainer.errors import UserError, bounded_message  # the trainer's config, pydantic: after the handlers
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
    try:
        args = build_parser().parse_args(argv)
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # here, not at exit, so that a reader gone away is handled below
        return code
    except UserError as exc:
        print(f"sweep: error: {bounded_message(str(exc), 2000)}", file=sys.stderr)  # one line, whoever raised it
        return exc.exit_code
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
    except BrokenPipeError:
        # The reader went away (`sweep status ... | head`): stop quietly, as a shell tool does on SIGPIPE.
        stdout_to_devnull()
        return 128 + signal.SIGPIPE


def _interrupted(exc: KeyboardInterrupt) -> int:
    """The one line of a command stopped by a signal: the first one that came (a later one may have cut the
    clean-up short), and its exit status 128 + N."""
    signum = signal_latch.take() or getattr(exc, "signum", signal.SIGINT)
    print(f"sweep: interrupted by {signal.Signals(signum).name}; run the same command to go on", file=sys.stderr)
    return 128 + signum


if __name__ == "__main__":
    sys.exit(main())
