"""One module per `sweep` command beyond `run`: `status`, `dashboard`, `analyze`, `export`, `eval` (a model
on the STS and transfer tasks), `fetch` (the data), `slurm`, `doctor` (the machine checklist) with
`gpu_bench` (its GPU self-check), and `dry_run` (the trial table `sweep run --dry-run` prints). Each may use
the layers below (run, records, spec) and analysis/; the CLI (sweep/cli.py) parses arguments and calls them.
"""
