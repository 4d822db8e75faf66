"""Methods of one's own: the registry the built-in methods are registered in as plugins are, a plugin file's
method (docs/examples/dcl/dcl.py) validated, resolved and trained like a built-in one, and every way a plugin can
be wrong refused in one line naming its file and line."""

from __future__ import annotations

import math
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers import REPO
from trainer.config import RunConfig
from trainer.errors import ConfigError, UserError
from trainer.method_rules import method_entry, resolve
from trainer.methods import method_class
from trainer.methods.plugins import PluginNotFound, load_checked_plugins, load_plugins, plugin_digests

DCL_FOLDER = REPO / "docs" / "examples" / "dcl"


@pytest.fixture(scope="module")
def dcl():
    """The DCL plugin's module, registered."""
    (entry,) = load_plugins(["dcl.py"], DCL_FOLDER)
    return entry


def numpy_dcl(z1: np.ndarray, z2: np.ndarray, tau: float, sigma: float | None) -> float:
    """Yeh et al. 2022, eq. 6 (DCL) and eq. 7 (DCLW's weight), written from the paper with loops: the positive
    pair's logit, weighted, against the log-sum of the negatives' only."""
    n = len(z1)
    a = z1 / np.linalg.norm(z1, axis=1, keepdims=True)
    b = z2 / np.linalg.norm(z2, axis=1, keepdims=True)
    positives = np.array([a[i] @ b[i] for i in range(n)])
    if sigma is None:
        weights = np.ones(n)
    else:
        mean = np.mean([math.exp(p / sigma) for p in positives])
        weights = np.array([2 - math.exp(p / sigma) / mean for p in positives])
    total = 0.0
    for i in range(n):
        negatives = sum(math.exp(a[i] @ b[j] / tau) for j in range(n) if j != i)
        total += -weights[i] * positives[i] / tau + math.log(negatives)
    return total / n


@pytest.mark.parametrize("sigma", [None, 0.5])
def test_the_dcl_loss_is_the_papers_formula(dcl, sigma):
    module = sys.modules[dcl.definition.__module__]
    rng = np.random.default_rng(7)
    z1, z2 = rng.normal(size=(6, 5)), rng.normal(size=(6, 5))
    got = module.dcl_loss(torch.tensor(z1), torch.tensor(z2), 0.05, sigma).item()
    assert got == pytest.approx(numpy_dcl(z1, z2, 0.05, sigma), rel=1e-9)
    infonce = module.dcl_loss(torch.tensor(z1), torch.tensor(z2), 0.05, None).item()
    assert sigma is None or not math.isclose(got, infonce)  # the weight changes the loss


def test_a_plugin_method_resolves_and_builds_like_a_built_in_one(dcl):
    assert (dcl.name, dcl.label, dcl.section.__name__) == ("dcl", "DCL", "DCLConfig")
    config = resolve(RunConfig.from_dict({"method": "dcl", "model": "bert-base-uncased", "dcl": {"sigma": 0.5}}))
    assert (config.optim.lr, config.batch_size, config.dcl.sigma) == (3e-5, 64, 0.5)  # SimCSE's per model
    assert config.to_dict()["dcl"] == {"sigma": 0.5} and RunConfig.from_dict(config.to_dict()) == config
    assert "dcl" not in RunConfig.from_dict({"method": "simcse"}).to_dict()
    assert method_class("dcl") is dcl.definition and dcl.rules.precision_on("cuda", "auto") == "fp16"
    with pytest.raises(ConfigError, match="'mix.enabled': DCL's loss takes no mixed negatives"):
        resolve(RunConfig.from_dict({"method": "dcl", "mix": {"enabled": True}}))


def test_a_method_section_is_read_by_its_own_runs_only(dcl):
    with pytest.raises(ConfigError, match=r"config key 'dcl': the config section of method dcl, read by its runs "
                                          r"only; this config's method is 'simcse'"):
        RunConfig.from_dict({"method": "simcse", "dcl": {"sigma": 0.5}})
    with pytest.raises(ConfigError, match=r"config key 'dcl.sigm' is unknown \(did you mean 'sigma'\?\)"):
        RunConfig.from_dict({"method": "dcl", "dcl": {"sigm": 0.5}})


def test_an_unknown_method_name_is_refused_with_the_closest_one(dcl):
    with pytest.raises(ConfigError, match=r"unknown method 'dlc' \(did you mean 'dcl'\?\); known: simcse, mocose, gs, "
                                          r"mix, dcl"):
        RunConfig.from_dict({"method": "dlc"})


def plugin(tmp_path: Path, body: str, name: str = "mine.py") -> Path:
    """A plugin file of HEAD's imports (3 lines) and `body` (dedented) in `tmp_path`."""
    path = tmp_path / name
    path.write_text(HEAD + textwrap.dedent(body))
    return path


HEAD = """\
from trainer.config import Section
from trainer.method_rules import MethodRules
from trainer.methods import SimCSE, StepOutput, Method
"""


@pytest.mark.parametrize("body, line, says", [
    ("class Mine(Method):\n    name = 'nolossmethod'\n    label = 'No loss'\n", 4, "has no loss: define loss"),
    ("import not_a_module_anywhere\n", 4, "failed on import: ModuleNotFoundError: No module named"),
    ("x = 1 +\n", 4, "failed on import: SyntaxError: invalid syntax"),
    ("class Mine(SimCSE):\n    name = 'queue'\n    label = 'Q'\n", 4, "method name 'queue' is a run config key"),
    ("class Mine(SimCSE):\n    name = 'nolabel'\n", 4, "needs `label`"),
    ("class Knobs(Section):\n    weight: float\n\n\nclass Mine(SimCSE):\n    name = 'nodefault'\n    label = 'N'\n"
     "    config = Knobs\n", 8, "config Knobs has a knob without a valid default"),
])
def test_a_wrong_plugin_is_refused_naming_its_file_and_line(tmp_path, body, line, says):
    path = plugin(tmp_path, body)
    with pytest.raises(UserError) as caught:
        load_plugins([str(path)])
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: ") and says in message and "\n" not in message, message


def test_a_misspelt_knob_in_a_plugins_rules_is_refused_at_its_first_resolve(tmp_path):
    path = plugin(tmp_path, """\
    class Knobs(Section):
        weight: float = 1.0


    class Misspelt(SimCSE):
        name = "misspelt"
        label = "Misspelt"
        config = Knobs
        rules = MethodRules(defaults={"misspelt.wieght": 2.0})

        def loss(self, ids, mask, position_ids=None):
            return StepOutput(ids.sum())
    """)
    load_plugins([str(path)])
    with pytest.raises(UserError, match=rf"^{path}:8: method 'misspelt': its rules name 'misspelt.wieght', which is "
                                        r"no config key of its runs \(did you mean 'misspelt.weight'\?\)"):
        resolve(RunConfig.from_dict({"method": "misspelt"}))


def test_a_plugin_that_is_not_there_or_defines_no_method_is_not_found(tmp_path):
    with pytest.raises(PluginNotFound, match=r"plugin nothere.py: no such file"):
        load_plugins(["nothere.py"], tmp_path)
    with pytest.raises(PluginNotFound, match=r"plugin not_a_module_anywhere: no module of that name"):
        load_plugins(["not_a_module_anywhere"])
    with pytest.raises(PluginNotFound, match="defines no method"):
        load_plugins([str(plugin(tmp_path, "x = 1\n"))])


def test_a_worker_runs_the_drivers_plugin_source_or_none(tmp_path):
    source = """\
    class Checked(SimCSE):
        name = "checked"
        label = "Checked"

        def loss(self, ids, mask, position_ids=None):
            return StepOutput(ids.sum() * {})
    """
    path = plugin(tmp_path, source.format(1))
    digests, texts = plugin_digests([str(path)]), {str(path): path.read_text()}
    load_checked_plugins(digests)  # the same file on this node: imported from it
    assert method_entry("checked").source_file == str(path)
    path.write_text(path.read_text().replace("* 1", "* 2"))  # edited since the driver imported it
    with pytest.raises(UserError, match=r"plugin .*mine.py: this node does not hold the source the driver imported "
                                        r"\(sha256 [0-9a-f]{12}\) and the trial carries none"):
        load_checked_plugins(digests)
    path.unlink()  # a node that does not see the driver's disk
    load_checked_plugins(digests, texts)  # the driver's text, written to this node's temp dir
    entry = method_entry("checked")
    assert entry.origin == str(path) and entry.source_file != str(path)
    assert Path(entry.source_file).read_text() == texts[str(path)]
    from trainer.provenance import code_state

    assert code_state()["plugins"][str(path)] == digests[str(path)]  # the driver's path and digest, on any node


def test_python_m_trainer_takes_a_plugin(tmp_path):
    """A run of a plugin's method without a study: the plugin's section is checked as any (a bad value, exit 2)."""
    import subprocess

    from tests.deadlines import scaled

    done = subprocess.run([sys.executable, "-m", "trainer", "-", "method=dcl", "dcl.sigma=-1", "--plugin",
                           str(DCL_FOLDER / "dcl.py")], capture_output=True, text=True, timeout=scaled(120),
                          cwd=tmp_path)
    assert (done.returncode, done.stderr.strip()) == (2, "trainer: error: config key 'dcl.sigma': expected a number "
                                                         "> 0, got -1")
    unknown = subprocess.run([sys.executable, "-m", "trainer", "-", "method=dcl"], capture_output=True, text=True,
                             timeout=scaled(120), cwd=tmp_path)
    assert unknown.returncode == 2 and "unknown method 'dcl'" in unknown.stderr


def test_no_list_of_method_names_outside_the_vocabulary():
    """The built-in methods are registered as plugins are: no module of the tool lists their names (a tuple, list,
    set or dict keyed by two or more of them) but trainer.vocabulary, which names each once for the registry."""
    import ast

    repo = Path(__file__).resolve().parents[3]
    names = {"simcse", "mocose", "gs", "mix"}
    found = []
    for package in ("trainer", "sweep", "analysis", "bench", "scripts"):
        for path in sorted((repo / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                items = (node.elts if isinstance(node, (ast.List, ast.Tuple, ast.Set))
                         else node.keys if isinstance(node, ast.Dict) else [])
                if len({item.value for item in items if isinstance(item, ast.Constant) and item.value in names}) > 1:
                    found.append(f"{path.relative_to(repo)}:{node.lineno}")
    assert [place.split(":")[0] for place in found] == ["trainer/vocabulary.py"], found
