"""`sweep run --dry-run` says, before anything runs, which corpus the trials train on and what each trial's
final evaluation covers, with its cost beside the training's."""

from __future__ import annotations

import re
import shutil

import pytest

from sweep.commands.dry_run import print_dry_run
from sweep.spec import load_study
from tests.helpers import needs_mteb, study_file
from trainer.vocabulary import STS_TASKS, STS_TEST_PAIRS


def dry_run_lines(capsys, path, label: str) -> list[str]:
    print_dry_run(load_study(path))
    out = capsys.readouterr().out
    return [line[len(label) + 1:].strip() for line in out.splitlines() if line.startswith(label + ":")]


def tiny_study(tmp_path, name: str, data_dir, **base) -> object:
    spec = {"name": name, "base": {"model": "embedded", "method": "simcse", "batch_size": 8, "max_steps": 6,
                                   "data": {"data_dir": str(data_dir)}, **base},
            "parameters": {"optim.lr": [1e-5, 3e-5]}, "results_dir": str(tmp_path / "results")}
    return study_file(tmp_path, spec)


def test_the_dry_run_names_the_corpus_and_its_path(tmp_path, capsys, shared_data_dir):
    data = tmp_path / "data"
    (data / "corpus").mkdir(parents=True)
    sample = data / "corpus" / "wiki1m_sample.txt"
    shutil.copyfile(shared_data_dir / "corpus" / "wiki1m_sample.txt", sample)
    path = tiny_study(tmp_path, "nocorpus", data)

    # no data.corpus, only the sample installed: the trials train on the sample (the run's `note:`), and say so
    (text,) = dry_run_lines(capsys, path, "corpus")
    assert text.startswith(f"the corpus sample {sample}, 11,914 sentences"), text
    assert "data.corpus is not set and the full wiki1m is not installed" in text
    assert "`sweep data fetch --corpus full`" in text

    full = data / "corpus" / "wiki1m_for_simcse.txt"
    full.write_text("one sentence\nanother sentence\n\nand a third\n")
    (text,) = dry_run_lines(capsys, path, "corpus")
    assert text == f"the full wiki1m {full}, 3 sentences"

    own = tmp_path / "mine.txt"
    own.write_text("".join(f"sentence {i}\n" for i in range(20)))
    path = tiny_study(tmp_path, "own", data, data={"data_dir": str(data), "corpus": str(own), "max_sentences": 8})
    (text,) = dry_run_lines(capsys, path, "corpus")
    assert text == f"{own} (data.corpus), the first 8 of its 20 sentences (data.max_sentences)"

    path = tiny_study(tmp_path, "nodata", tmp_path / "empty")
    (text,) = dry_run_lines(capsys, path, "corpus")
    assert text.startswith("none: ") and "sweep data fetch" in text


def test_the_dry_run_says_what_the_final_evaluation_covers_and_that_seven_tasks_cost_far_more(tmp_path, capsys,
                                                                                            shared_data_dir):
    path = tiny_study(tmp_path, "seven", shared_data_dir)
    (text,) = dry_run_lines(capsys, path, "eval")
    assert text.startswith("the seven STS tasks (" + ", ".join(STS_TASKS) + ") (eval.final_tasks is not set)")
    assert "at the end of every trial: 18,850 STS test pairs, 37,700 sentences to encode" in text
    assert "each trial trains on 48 sentences (steps x batch_size)" in text
    assert "the seven-task evaluation costs far more than this short training" in text
    assert "eval.final_tasks: [STSBenchmark] scores STS-B test alone (1,379 pairs)" in text

    path = tiny_study(tmp_path, "stsb", shared_data_dir, eval={"final_tasks": ["STSBenchmark"]})
    (text,) = dry_run_lines(capsys, path, "eval")
    assert text == ("STSBenchmark at the end of every trial: 1,379 STS test pairs, 2,758 sentences to encode; "
                    "each trial trains on 48 sentences (steps x batch_size)")

    spec = {"name": "both", "base": {"model": "embedded", "method": "simcse", "batch_size": 8, "max_steps": 6},
            "parameters": {"eval.final_tasks": [["STSBenchmark"], ["STS12", "MR"]], "optim.lr": [1e-5, 3e-5]},
            "results_dir": str(tmp_path / "results")}
    lines = dry_run_lines(capsys, study_file(tmp_path, spec), "eval")
    assert len(lines) == 2 and all(line.endswith("(2 trials)") for line in lines)
    assert lines[1].startswith("STS12 and the transfer tasks MR at the end of every trial: 3,108 STS test pairs")


def test_the_dry_runs_pair_counts_are_the_datas(shared_data_dir):
    from trainer.evaluation.sts import load_task

    counted = {task: sum(len(pairs.gold) for pairs in load_task(shared_data_dir, task)) for task in STS_TASKS}
    assert counted == STS_TEST_PAIRS


@pytest.mark.parametrize("study", ["quickstart", "methods"])
def test_the_dry_run_of_the_shipped_studies_names_corpus_and_evaluation(study, capsys):
    from tests.helpers import REPO

    print_dry_run(load_study(REPO / "studies" / f"{study}.yaml"))
    out = capsys.readouterr().out
    assert re.search(r"^corpus: +\S", out, re.M) and re.search(r"^eval: +\S", out, re.M)


def test_the_dry_run_shows_each_papers_lr_and_batch_size_per_model(tmp_path, capsys):
    """Per-model settings from the papers' own text (MoCoSE section 4.1: BERT-large lr 1e-5, batch 32; SimCSE
    Table A.1: RoBERTa-base lr 1e-5, batch 512; MixCSE names no RoBERTa setting, so bert-base's with a note),
    what the study sets itself, and the note a paper reading on the embedded model gets."""
    spec = {"name": "models", "base": {"model": "embedded", "method": "mocose", "max_steps": 6},
            "parameters": {"model": ["bert-large-uncased", "roberta-base", "embedded"],
                           "method": ["mocose", "simcse", "mix"]},
            "results_dir": str(tmp_path / "results")}
    lines = dry_run_lines(capsys, study_file(tmp_path, spec), "training")
    assert "MoCoSE on bert-large-uncased: lr 1e-05, batch 32 (MoCoSE section 4.1), 1 trial" in lines
    assert "SimCSE on roberta-base: lr 1e-05, batch 512 (SimCSE Table A.1), 1 trial" in lines
    assert ("MixCSE on roberta-base: lr 3e-05, batch 64 (bert-base's (MixCSE, Implementation Details): the paper "
            "names no setting for roberta-base), 1 trial") in lines
    assert lines[-1].startswith("model embedded (all-MiniLM-L6-v2, already trained contrastively on sentence pairs) "
                                "is no paper's starting point")
    spec["base"]["batch_size"] = 16
    spec["parameters"] = {"model": ["bert-large-uncased"]}
    [line] = dry_run_lines(capsys, study_file(tmp_path, spec), "training")
    assert line == ("MoCoSE on bert-large-uncased: lr 1e-05, batch 16 (lr: MoCoSE section 4.1; batch_size: the "
                    "study's)")


def test_the_dry_run_says_whether_the_trials_compile_their_step_and_why(tmp_path, capsys, shared_data_dir):
    from trainer.compiled import AUTO_MIN_STEPS, CompileRule

    on_cpu = tiny_study(tmp_path, "cpu", shared_data_dir)  # compile: auto on the CPU
    assert dry_run_lines(capsys, on_cpu, "compile") == [f"eager ({CompileRule('auto').decide('cpu', 6)[1]})"]
    # on CUDA (resources.gpu), auto compiles the long trials only: one line per decision, each with its count
    spec = {"name": "gpu", "base": {"model": "embedded", "method": "simcse", "batch_size": 8,
                                    "data": {"data_dir": str(shared_data_dir)}},
            "parameters": {"max_steps": [10, AUTO_MIN_STEPS]}, "resources": {"gpu": 1},
            "results_dir": str(tmp_path / "results")}
    lines = dry_run_lines(capsys, study_file(tmp_path, spec), "compile")
    assert lines == [f"eager ({CompileRule('auto').decide('cuda', 10)[1]}), 1 trial",
                     f"compiled ({CompileRule('auto').decide('cuda', AUTO_MIN_STEPS)[1]}), 1 trial"]


def power_written_out(delta: float, sd: float, n: int) -> float:
    """A two-sided paired t-test's power at alpha 0.05: P(|T'| > t_{n-1,0.975}), T' noncentral t with
    noncentrality delta sqrt(n) / sd."""
    from scipy import stats

    critical, shift = stats.t.ppf(0.975, n - 1), delta * n ** 0.5 / sd
    lower = stats.nct.cdf(-critical, n - 1, shift)  # ~0 far out, where scipy may give NaN
    return stats.nct.sf(critical, n - 1, shift) + (0.0 if lower != lower else lower)


def test_the_dry_run_states_the_difference_its_seeds_resolve_and_the_seeds_a_target_needs(tmp_path, capsys,
                                                                                          shared_data_dir):
    from scipy.optimize import brentq

    spec = {"name": "sized", "base": {"model": "embedded", "method": "simcse", "batch_size": 8, "max_steps": 6,
                                      "data": {"data_dir": str(shared_data_dir)}},
            "parameters": {"optim.lr": [1e-5, 3e-5]}, "seeds": [1, 2, 3, 4],
            "analysis": {"seed_spread": 0.8, "target_difference": 0.5}, "results_dir": str(tmp_path / "results")}
    resolved, needed = dry_run_lines(capsys, study_file(tmp_path, spec), "seeds")
    delta = brentq(lambda d: power_written_out(d, 0.8, 4) - 0.8, 1e-6, 4.0)
    seeds = next(n for n in range(2, 1000) if power_written_out(0.5, 0.8, n) >= 0.8)
    assert resolved.startswith(f"4 seeds resolve {delta:.2f} points of the seven-task STS average "), resolved
    assert "per-seed difference sd 0.80, the study's analysis.seed_spread" in resolved
    assert needed == f"a difference of 0.5 (analysis.target_difference) needs {seeds} seeds at that spread; " \
                     "the study has 4"

    # without a spread of its own and with one seed: the sourced default, and what 3 and 5 seeds would resolve
    del spec["analysis"]
    spec["seeds"] = [1]
    (text,) = dry_run_lines(capsys, study_file(tmp_path, spec), "seeds")
    sd = (2.32 ** 2 + 0.61 ** 2) ** 0.5  # MixCSE Table 1: SimCSE's and MixCSE's spreads over five runs
    at = {n: brentq(lambda d, n=n: power_written_out(d, sd, n) - 0.8, 1e-6, 4 * sd) for n in (3, 5)}
    assert text.startswith(f"1 seed: no paired interval (it needs 3 shared seeds); 3 seeds resolve {at[3]:.2f}; "
                           f"5 seeds resolve {at[5]:.2f} points"), text
    assert f"per-seed difference sd {sd:.2f}, default: sqrt(2.32^2 + 0.61^2)" in text


@needs_mteb
def test_the_dry_run_counts_the_mteb_tasks_the_trials_score(tmp_path, capsys, shared_data_dir):
    path = tiny_study(tmp_path, "with_mteb", shared_data_dir, eval={"mteb": ["local:STSBenchmark"]})
    (text,) = dry_run_lines(capsys, path, "mteb")
    pairs = STS_TEST_PAIRS["STSBenchmark"]
    assert text == (f"local:STSBenchmark ({pairs:,} test samples) after the final tasks of 2 trials, through mteb: "
                    f"{pairs:,} samples per trial to score (not in the device-hour estimate)")
    assert dry_run_lines(capsys, tiny_study(tmp_path, "without", shared_data_dir), "mteb") == []


@needs_mteb
def test_the_dry_run_names_an_mteb_task_mteb_does_not_know_with_the_closest_one(tmp_path, capsys, shared_data_dir):
    path = tiny_study(tmp_path, "misspelt", shared_data_dir, eval={"mteb": ["STSBenchmar"]})
    assert dry_run_lines(capsys, path, "mteb") == ["eval.mteb: mteb has no task 'STSBenchmar' (did you mean "
                                                   "'STSBenchmark'?)"]
    path = tiny_study(tmp_path, "not_a_task", shared_data_dir, eval={"mteb": ["embedded"]})
    assert dry_run_lines(capsys, path, "mteb") == ["eval.mteb: mteb has no task 'embedded'; `mteb available_tasks` "
                                                   "lists them"]
