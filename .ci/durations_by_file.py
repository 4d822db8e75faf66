"""Print where the suite's time went: for each tier (the `tier` property tests/conftest.py gives every test, "fast"
or "slow"), its number of tests and the sum of their durations, then that tier's files with the most time, each
with its number of tests and its slowest one. A duration is set-up, call and tear-down, as pytest's JUnit XML
records them; the sums add up tests that ran side by side on several workers, so a tier's sum is its test time,
not the wall time of `pytest -m "not slow"` or `pytest -m slow` run alone. A map for making the suite faster; no gate.

    python .ci/durations_by_file.py JUNIT_XML [--top N]
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from collections import defaultdict

Timing = tuple[float, str]  # (seconds, test name)


def test_file(classname: str) -> str:
    """tests.e2e.test_stop[.TestClass] -> tests/e2e/test_stop.py"""
    parts = classname.split(".")
    while len(parts) > 1 and parts[-1][:1].isupper():
        parts.pop()
    return "/".join(parts) + ".py"


def read_tiers(junit_xml: str) -> dict[str, dict[str, list[Timing]]]:
    """tier -> test file -> its tests' timings; a test without the property is in the tier "unmarked"."""
    tiers: dict[str, dict[str, list[Timing]]] = defaultdict(lambda: defaultdict(list))
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        tier = next((p.get("value") for p in case.iter("property") if p.get("name") == "tier"), None) or "unmarked"
        timing = (float(case.get("time") or 0.0), case.get("name", ""))
        tiers[tier][test_file(case.get("classname", ""))].append(timing)
    return tiers


def print_files(per_file: dict[str, list[Timing]], top: int) -> None:
    ranked = sorted(per_file.items(), key=lambda item: -sum(t for t, _ in item[1]))
    total = sum(t for tests in per_file.values() for t, _ in tests) or 1.0
    width = max((len(path) for path, _ in ranked[:top]), default=4)
    print(f"  {'file':<{width}}  seconds  share  tests  slowest")
    for path, tests in ranked[:top]:
        seconds = sum(t for t, _ in tests)
        slowest = max(tests)
        print(f"  {path:<{width}}  {seconds:7.1f}  {seconds / total:5.1%}  {len(tests):5d}  "
              f"{slowest[0]:.1f} s {slowest[1]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit_xml")
    parser.add_argument("--top", type=int, default=15, help="files shown per tier (default 15)")
    args = parser.parse_args(argv)
    tiers = read_tiers(args.junit_xml)
    for tier in sorted(tiers, key=lambda name: (name != "fast", name)):
        per_file = tiers[tier]
        seconds = sum(t for tests in per_file.values() for t, _ in tests)
        count = sum(len(tests) for tests in per_file.values())
        print(f"tier {tier}: {count} tests, {seconds:.1f} s of test time in {len(per_file)} files; "
              f"the {min(args.top, len(per_file))} files with the most:")
        print_files(per_file, args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
