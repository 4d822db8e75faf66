"""A method's own keys are scoped to its trials (sweep.spec.expand, sweep.spec.keys), and the keys of today's
built-in studies are the keys they had before methods became plugins: a finished study resumes without
re-running a trial."""

from __future__ import annotations

import copy

import yaml

from sweep.spec import expand, load_study
from sweep.spec.schema import StudySpec
from tests.helpers import REPO

DCL_STUDY = REPO / "docs" / "examples" / "dcl" / "dcl_vs_simcse.yaml"

# The trial keys the code before the registry (landed main b5ba5c6) gave these studies, in expansion order.
KEYS_BEFORE = {
    "quickstart.yaml": ["771c244ce6e8", "832893898719", "c78a2b474abc"],
    "methods.yaml": ["bf3aef429460", "d46fb1c74654", "d871e04dfe3a", "be25aae2566d", "1206b2029492",
                     "71fe3f97455e"],
}


def test_the_built_in_studies_keep_their_trial_keys():
    for name, keys in KEYS_BEFORE.items():
        trials = expand(load_study(REPO / "studies" / name))
        assert [t.key for t in trials[:len(keys)]] == keys, name


def test_simcse_runs_once_per_seed_and_never_holds_the_plugins_knob():
    trials = expand(load_study(DCL_STUDY))
    simcse = [t for t in trials if t.config["method"] == "simcse"]
    dcl = [t for t in trials if t.config["method"] == "dcl"]
    assert sorted(t.seed for t in simcse) == [1, 2, 3] and len(dcl) == 9
    for trial in simcse:
        assert "dcl" not in trial.config and trial.params == {"method": "simcse"}
        assert not any(key.startswith("dcl") for key in trial.requested)
    assert {t.params["dcl.sigma"] for t in dcl} == {None, 0.5, 1.0}
    assert {t.config["dcl"]["sigma"] for t in dcl} == {None, 0.5, 1.0}
    # DCL at its knob's default asks for nothing of the knob: the key a study that never names it gives
    default = next(t for t in dcl if t.params["dcl.sigma"] is None)
    assert "dcl.sigma" not in default.requested and default.requested["method"] == "dcl"


def test_simcses_keys_are_those_of_a_study_without_the_plugin():
    data = yaml.safe_load(DCL_STUDY.read_text())
    plain = copy.deepcopy(data)
    del plain["plugins"], plain["parameters"]["dcl.sigma"], plain["reference"]
    plain["parameters"]["method"] = ["simcse"]
    with_plugin = [t.key for t in expand(load_study(DCL_STUDY)) if t.config["method"] == "simcse"]
    without = [t.key for t in expand(StudySpec.model_validate(plain))]
    assert with_plugin == without and len(without) == 3


def test_a_plugin_study_given_more_seeds_is_an_extension_of_its_recorded_copy(tmp_path):
    """The results folder's study.yaml is a copy of the study: its plugin files are read beside the study file."""
    import shutil

    from sweep.records.history import check_same_study
    from sweep.records.store import StudyFolder

    shutil.copy(DCL_STUDY.parent / "dcl.py", tmp_path / "dcl.py")
    data = yaml.safe_load(DCL_STUDY.read_text())
    data["results_dir"] = str(tmp_path / "results")
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    folder = StudyFolder(load_study(path, trials=False).study_dir)
    folder.path.mkdir(parents=True)
    folder.write_study_yaml(load_study(path, trials=False))
    data["seeds"] = [1, 2, 3, 4]
    path.write_text(yaml.safe_dump(data))
    change = check_same_study(load_study(path, trials=False))
    assert change is not None and change.added and not change.changed, change


def test_a_tpe_ask_draws_a_methods_own_key_only_for_that_method(tmp_path):
    import shutil

    import optuna

    from sweep.spec import search_space, trial_from_params
    from sweep.spec.expand import ask_in_space

    data = yaml.safe_load(DCL_STUDY.read_text())
    data.update(method="tpe", budget=8, results_dir=str(tmp_path / "results"))
    data["parameters"]["dcl.sigma"] = {"distribution": "uniform", "low": 0.1, "high": 1.0}
    shutil.copy(DCL_STUDY.parent / "dcl.py", tmp_path / "dcl.py")
    path = tmp_path / "tpe.yaml"
    path.write_text(yaml.safe_dump(data))
    spec = load_study(path)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen = set()
    for _ in range(12):
        live = ask_in_space(study, spec, search_space(spec))
        method = live.params["method"]
        seen.add(method)
        assert ("dcl.sigma" in live.params) == (method == "dcl"), live.params
        trial = trial_from_params(spec, dict(live.params), 1)
        assert trial.params.keys() == live.params.keys() and ("dcl" in trial.config) == (method == "dcl")
        study.tell(live, 1.0)
    assert seen == {"simcse", "dcl"}


def test_a_constraint_may_name_a_methods_own_key(tmp_path):
    """The plugins are imported before the constraints are checked; another method's trial reads the key as null."""
    import shutil

    shutil.copy(DCL_STUDY.parent / "dcl.py", tmp_path / "dcl.py")
    data = yaml.safe_load(DCL_STUDY.read_text())
    data["constraints"] = ["method != 'dcl' or dcl.sigma != 1.0"]
    path = tmp_path / "constrained.yaml"
    path.write_text(yaml.safe_dump(data))
    trials = expand(load_study(path))
    assert [(t.config["method"], t.params.get("dcl.sigma", "absent")) for t in trials if t.seed == 1] == [
        ("simcse", "absent"), ("dcl", None), ("dcl", 0.5)]
