"""Print where a tier's time went, per test file: the sum of its tests' durations (set-up, call and tear-down,
as pytest's JUnit XML records them), the number of tests and the slowest one; the files with the most time
first. A map for making the suite faster; no gate.

    python .ci/durations_by_file.py JUNIT_XML [--top N]
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from collections import defaultdict


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit_xml")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    per_file: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for case in ET.parse(args.junit_xml).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")  # tests.e2e.test_stop[.TestClass]
        while len(parts) > 1 and parts[-1][:1].isupper():
            parts.pop()
        path = "/".join(parts) + ".py"
        per_file[path].append((float(case.get("time") or 0.0), case.get("name", "")))
    ranked = sorted(per_file.items(), key=lambda item: -sum(t for t, _ in item[1]))
    total = sum(t for tests in per_file.values() for t, _ in tests)
    width = max((len(path) for path, _ in ranked[:args.top]), default=4)
    print(f"{'file':<{width}}  seconds  share  tests  slowest")
    for path, tests in ranked[:args.top]:
        seconds = sum(t for t, _ in tests)
        slowest = max(tests)
        print(f"{path:<{width}}  {seconds:7.1f}  {seconds / total:5.1%}  {len(tests):5d}  "
              f"{slowest[0]:.1f} s {slowest[1]}")
    print(f"{'all ' + str(len(per_file)) + ' files':<{width}}  {total:7.1f}  100.0%  "
          f"{sum(len(t) for t in per_file.values()):5d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
