"""Print line coverage per package (trainer, trainer/methods, sweep/run, ...) from the .coverage file the
test run left: statements, statements run, percent. Files never imported count with 0 run. No gate.

    python .ci/coverage_by_package.py [DATA_FILE]
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import coverage


def main(data_file: str = ".coverage") -> int:
    cov = coverage.Coverage(data_file=data_file)
    cov.load()
    root = Path.cwd()
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    files = set(cov.get_data().measured_files())
    for package in ("trainer", "sweep", "analysis"):  # files no test imported still count
        files |= {str(p.resolve()) for p in (root / package).rglob("*.py")}
    for path in sorted(files):
        try:
            relative = Path(path).resolve().relative_to(root)
        except ValueError:
            continue
        if relative.parts[0] not in ("trainer", "sweep", "analysis"):
            continue
        _, statements, _, missing, _ = cov.analysis2(path)
        package = "/".join(relative.parts[:-1])
        totals[package][0] += len(statements)
        totals[package][1] += len(statements) - len(missing)
    width = max(len(p) for p in totals)
    print(f"{'package':<{width}}  statements    run  covered")
    all_statements = all_run = 0
    for package, (statements, run) in sorted(totals.items()):
        all_statements += statements
        all_run += run
        print(f"{package:<{width}}  {statements:>10}  {run:>5}  {100 * run / max(statements, 1):6.1f}%")
    print(f"{'all':<{width}}  {all_statements:>10}  {all_run:>5}  {100 * all_run / max(all_statements, 1):6.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
