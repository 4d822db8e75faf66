"""A node's verdict against the driver (sweep.run.node_checks): what makes a node unfit, said in one line."""

from __future__ import annotations

from sweep.run.node_checks import code_fingerprint, node_problem, software_versions

DRIVER = {"python": "3.11.7", "code": "a" * 12, "contrastive-sweep": "0.1.0", "torch": "2.13.0",
          "transformers": "5.24.0", "ray": "2.60.0"}


def report(problem=None, **versions):
    return {"host": "gpu2", "ip": "10.0.0.12", "versions": {**DRIVER, **versions}, "problem": problem}


def test_a_node_with_the_drivers_versions_and_inputs_is_fit():
    assert node_problem(report(), DRIVER) is None


def test_missing_data_is_the_nodes_own_one_line_with_its_fix():
    line = "data directory /data does not exist: run `sweep data fetch`"
    assert node_problem(report(problem=line), DRIVER) == line


def test_other_code_or_versions_are_named_with_the_drivers():
    assert "other code of this project" in node_problem(report(code="b" * 12), DRIVER)
    problem = node_problem(report(torch="2.12.0", transformers="4.57.0"), DRIVER)
    assert "torch 2.12.0 (driver 2.13.0)" in problem and "transformers 4.57.0 (driver 5.24.0)" in problem
    assert "\n" not in problem


def test_this_process_reports_its_versions_and_a_stable_code_hash():
    versions = software_versions()
    assert set(DRIVER) <= set(versions) and versions["code"] == code_fingerprint()
    assert len(versions["code"]) == 12 and versions["torch"].startswith("2.")
