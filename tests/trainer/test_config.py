"""The run config: paper defaults, method-dependent defaults, YAML, dotted overrides, errors naming the key."""

from __future__ import annotations

import pytest
import yaml

from trainer.config import RunConfig, field_names, number_kind
from trainer.errors import UserError
from trainer.slices import parse_slices


# ---- defaults ---------------------------------------------------------------------------------------
def test_defaults_follow_the_mocose_paper():
    cfg = RunConfig()
    assert cfg.method == "mocose"
    # section 4.1's bert-base settings, which every model the paper does not name (the embedded default) takes
    assert cfg.optim.lr is None and cfg.resolved().optim.lr == pytest.approx(3e-5)
    assert cfg.batch_size is None and cfg.resolved().batch_size == 64
    assert cfg.queue.size == 512 and cfg.queue.initial_size == 128
    assert cfg.temperature == pytest.approx(0.05)
    assert cfg.dropout is None and cfg.resolved().dropout == pytest.approx(0.1)
    assert cfg.seed == 42
    assert cfg.optim.schedule == "linear" and cfg.optim.warmup_steps == 0
    assert cfg.optim.grad_clip == pytest.approx(1.0)
    assert (cfg.ema.schedule, cfg.ema.decay, cfg.ema.decay_end) == ("cosine", 0.75, None)
    assert cfg.resolved().ema.decay_end == 0.95 and cfg.resolved().ema.hold_after_schedule is True
    assert (cfg.heads.projection_layers, cfg.heads.predictor_layers) == (1, 2)
    assert cfg.pooler == "cls_before_pooler"
    # eq. 1's gradient of the current loss, Algorithm 1's Adam
    assert cfg.fgsm.mode is None and cfg.resolved().fgsm.mode == "exact"
    assert cfg.optim.algorithm is None and cfg.resolved().optim.algorithm == "adam"
    # method-dependent fields stay unset until resolved()
    assert cfg.fgsm.eps is None and cfg.optim.weight_decay is None and cfg.eval.eval_steps is None


def test_resolved_fills_mocose_defaults():
    cfg = RunConfig(method="mocose").resolved()
    assert cfg.fgsm.eps == pytest.approx(5e-9)
    assert cfg.optim.weight_decay == pytest.approx(1e-6)
    assert cfg.eval.eval_steps == 100
    assert cfg.mix.enabled is False
    assert cfg.gaussian_count() == 0


@pytest.mark.parametrize("method", ["simcse", "gs", "mix"])
def test_resolved_fills_simcse_family_defaults(method):
    cfg = RunConfig(method=method).resolved()
    assert cfg.fgsm.eps == 0.0
    assert cfg.optim.weight_decay == 0.0
    assert cfg.eval.eval_steps == 250  # SimCSE Appendix A: "every 250 training steps"
    assert RunConfig(method=method, variant="released").resolved().eval.eval_steps == 125  # the release scripts
    assert cfg.mix.enabled is (method == "mix")
    if method == "gs":
        assert cfg.gaussian.count_per_batch == pytest.approx(3.0)
        assert cfg.gaussian_count() == 3 * 64  # M = 3 x batch size (GS-InfoNCE paper)
    else:
        assert cfg.gaussian.count_per_batch is None and cfg.gaussian_count() == 0


def test_resolved_keeps_explicit_values():
    cfg = RunConfig.from_dict({"method": "mocose", "fgsm": {"eps": 0}, "optim": {"weight_decay": 0.01},
                               "eval": {"eval_steps": 7}}).resolved()
    assert cfg.fgsm.eps == 0.0 and cfg.optim.weight_decay == pytest.approx(0.01) and cfg.eval.eval_steps == 7
    gs = RunConfig.from_dict({"method": "gs", "gaussian": {"count": 5}}).resolved()
    assert gs.gaussian.count_per_batch is None and gs.gaussian_count() == 5
    # resolving twice changes nothing
    assert cfg.resolved() == cfg


# ---- YAML -------------------------------------------------------------------------------------------
def test_from_yaml(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(
        "method: mocose\n"
        "batch_size: 32\n"
        "queue: {size: 1024, initial_size: 256, slices: ['0-256', '768-1024']}\n"
        "ema: {schedule: constant, decay: 0.85}\n"
        "fgsm: {eps: 5e-9, mode: exact}\n"  # YAML 1.1 reads 5e-9 as a string
        "optim: {lr: 1e-5, betas: [0.9, 0.98]}\n"
    )
    cfg = RunConfig.from_yaml(path)
    assert cfg.batch_size == 32
    assert cfg.queue.size == 1024 and cfg.queue.initial_size == 256
    assert cfg.queue.slices == ["0-256", "768-1024"]
    assert cfg.ema.schedule == "constant" and cfg.ema.decay == pytest.approx(0.85)
    assert isinstance(cfg.fgsm.eps, float) and cfg.fgsm.eps == pytest.approx(5e-9)
    assert cfg.fgsm.mode == "exact"
    assert isinstance(cfg.optim.lr, float) and cfg.optim.lr == pytest.approx(1e-5)
    assert cfg.optim.betas == (0.9, 0.98)
    # untouched keys keep their defaults
    assert cfg.temperature == pytest.approx(0.05) and cfg.heads.predictor_layers == 2


def test_empty_yaml_is_the_defaults(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert RunConfig.from_yaml(path) == RunConfig()


@pytest.mark.parametrize("text, fragment", [
    ("method: [unclosed\n", "not valid YAML"),
    ("- a\n- b\n", "expected a mapping"),
])
def test_bad_yaml_files(tmp_path, text, fragment):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=fragment):
        RunConfig.from_yaml(path)


def test_missing_yaml_file(tmp_path):
    with pytest.raises(UserError, match="not found"):
        RunConfig.from_yaml(tmp_path / "nope.yaml")


# ---- dotted overrides -------------------------------------------------------------------------------
def test_dotted_overrides_parse_values():
    cfg = RunConfig().override([
        "queue.size=1024", "fgsm.eps=5e-9", "queue.slices=[0-256,768-1024]", "ema.decay=0.9",
        "method=simcse", "mix.stop_grad=false", "data.max_sentences=null", "optim.betas=[0.9,0.98]",
    ])
    assert cfg.queue.size == 1024 and isinstance(cfg.queue.size, int)
    assert isinstance(cfg.fgsm.eps, float) and cfg.fgsm.eps == pytest.approx(5e-9)
    assert cfg.queue.slices == ["0-256", "768-1024"]
    assert parse_slices(cfg.queue.slices, cfg.queue.size) == [(0, 256), (768, 1024)]
    assert cfg.ema.decay == pytest.approx(0.9)
    assert cfg.method == "simcse"
    assert cfg.mix.stop_grad is False
    assert cfg.data.max_sentences is None
    assert cfg.optim.betas == (0.9, 0.98)


def test_override_does_not_modify_the_original():
    cfg = RunConfig()
    other = cfg.override({"queue.size": 1024, "batch_size": 32})
    assert (other.queue.size, other.batch_size) == (1024, 32)
    assert (cfg.queue.size, cfg.batch_size) == (512, None)


def test_single_slice_string_becomes_a_list():
    cfg = RunConfig().override(["queue.slices=0-256"])
    assert cfg.queue.slices == ["0-256"]


def test_every_field_name_is_settable():
    names = field_names()
    assert {"queue.size", "fgsm.eps", "ema.decay", "optim.lr", "data.cache_dir", "eval.final_tasks"} <= set(names)
    assert "queue" not in names  # sections are not leaf keys


# ---- errors name the key ----------------------------------------------------------------------------
@pytest.mark.parametrize("assignments, key", [
    (["queue.sizes=3"], "queue.sizes"),
    (["learning_rate=0.1"], "learning_rate"),
    (["nosection.size=3"], "nosection"),
    (["batch_size=abc"], "batch_size"),
    (["batch_size=2.5"], "batch_size"),
    (["optim.lr=fast"], "optim.lr"),
    (["mix.stop_grad=maybe"], "mix.stop_grad"),
    (["method=bayes"], "method"),
    (["queue.size=128", "queue.initial_size=256"], "queue.initial_size"),
    (["queue.size=-1"], "queue.size"),
    (["queue.slices=[0-2000]"], "queue.slices"),
    (["queue.slices=[256-128]"], "queue.slices"),
    (["queue.slices=[first-half]"], "queue.slices"),
    (["ema.decay=1.0"], "ema.decay"),
    (["fgsm.eps=-1"], "fgsm.eps"),
    (["optim.lr=0"], "optim.lr"),
    (["batch_size=1"], "batch_size"),
    (["collapse_threshold=1.5"], "collapse_threshold"),
    (["optim.betas=[0.9]"], "optim.betas"),
])
def test_bad_overrides_raise_user_error_naming_the_key(assignments, key):
    with pytest.raises(UserError) as info:
        RunConfig().override(assignments)
    message = str(info.value)
    assert f"'{key}" in message, message
    assert "\n" not in message


def test_override_without_equals_sign():
    with pytest.raises(UserError, match="key=value"):
        RunConfig().override(["queue.size"])


@pytest.mark.parametrize("data, key", [
    ({"queue": {"sizes": 3}}, "queue.sizes"),
    ({"bogus": 1}, "bogus"),
    ({"batch_size": "64"}, "batch_size"),
    ({"queue": 5}, "queue"),
    ({"queue": {"size": 64, "initial_size": 65}}, "queue.initial_size"),
    ({"queue": {"size": 512, "slices": ["0-600"]}}, "queue.slices"),
    ({"gaussian": {"count": 3, "count_per_batch": 1.0}}, "gaussian"),
    ({"data": {"max_sentences": 10}, "batch_size": 64}, "data.max_sentences"),
    ({"eval": {"final_tasks": []}}, "eval.final_tasks"),  # not "no final evaluation": refused, with the fix
])
def test_bad_dicts_raise_user_error_naming_the_key(data, key):
    with pytest.raises(UserError) as info:
        RunConfig.from_dict(data)
    assert f"'{key}" in str(info.value), str(info.value)


# ---- round trip -------------------------------------------------------------------------------------
def test_round_trip_through_dict_and_yaml():
    cfg = RunConfig().override(["method=mocose", "queue.size=1024", "queue.slices=[0-256,768-1024]",
                                "fgsm.eps=5e-9", "optim.betas=[0.9,0.98]", "eval.final_tasks=[STSBenchmark]"])
    for variant in (cfg, cfg.resolved(), RunConfig(method="gs").resolved()):
        plain = variant.to_dict()
        assert RunConfig.from_dict(plain) == variant
        # plain data only: it survives a YAML dump (what the sweep writes as config.yaml)
        assert RunConfig.from_dict(yaml.safe_load(yaml.safe_dump(plain))) == variant


def test_an_unknown_key_gets_a_did_you_mean():
    with pytest.raises(UserError, match=r"config key 'queue.sizes' is unknown \(did you mean 'size'\?\)"):
        RunConfig.from_dict({"queue": {"sizes": 3}})


@pytest.mark.parametrize("key, kind", [
    ("batch_size", "int"), ("queue.size", "int"), ("temperature", "float"), ("dropout", "float"),
    ("fgsm.eps", "float"), ("optim.algorithm", None), ("queue.slices", None), ("ema.hold_after_schedule", None),
    ("model", None), ("queue.no_such_key", None), ("queue.size.more", None), ("no_section.size", None),
])
def test_number_kind_names_the_number_a_key_holds_optional_or_not(key, kind):
    # batch_size and dropout are optional (null: the method's default), queue.size and temperature are not;
    # a flag is a bool, not an int
    assert number_kind(key) == kind
