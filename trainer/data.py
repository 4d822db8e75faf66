"""Where the data lives, whether it can be trusted, and how many steps a run takes over its corpus.

The data directory holds the SentEval layout used by SimCSE and the three papers:

    <data dir>/senteval/STS/STS12-en-test/ ... STSBenchmark/, senteval/SICK/, transfer-task folders
    <data dir>/corpus/wiki1m_for_simcse.txt (full corpus) and/or corpus/wiki1m_sample.txt

It is `$SWEEP_DATA_DIR` if set, else `~/.cache/contrastive-sweep/data`; every command that reads data
takes an explicit directory that overrides both. `sweep data fetch` fills it. Every file we know is
listed with its size and sha256 in `data_manifest.tsv`; readers verify the files they open, so a
truncated or altered file is reported instead of silently changing the numbers.
"""

from __future__ import annotations

import hashlib
import math
import os
from functools import lru_cache
from pathlib import Path
from typing import Callable

from trainer.errors import ConfigError, UserError, excerpt

DEFAULT_DATA_DIR = Path("~/.cache/contrastive-sweep/data")
FULL_CORPUS = "corpus/wiki1m_for_simcse.txt"
SAMPLE_CORPUS = "corpus/wiki1m_sample.txt"
_MANIFEST = Path(__file__).with_name("data_manifest.tsv")


def data_dir(explicit: str | os.PathLike | None = None) -> Path:
    """The data directory: `explicit`, else $SWEEP_DATA_DIR, else ~/.cache/contrastive-sweep/data."""
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get("SWEEP_DATA_DIR")
    return Path(env).expanduser() if env else DEFAULT_DATA_DIR.expanduser()


@lru_cache(maxsize=1)
def manifest() -> dict[str, tuple[int, str]]:
    """relative path -> (size in bytes, sha256) for every file the project knows."""
    entries = {}
    for line in _MANIFEST.read_text().splitlines():
        if line.strip():
            path, size, sha = line.split("\t")
            entries[path] = (int(size), sha)
    return entries


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _probe(check: Callable[[Path], bool], path: Path) -> bool:
    """`check(path)` (Path.is_file, Path.is_dir), with an OS refusal as a one-line UserError: pathlib answers
    False for a missing path but raises for one too long for the OS or behind a folder it may not read."""
    try:
        return check(path)
    except OSError as exc:
        raise UserError(f"cannot look at {excerpt(str(path), 120)}: {exc.strerror}; fix data.data_dir / data.corpus "
                        "(or $SWEEP_DATA_DIR)") from None


def file_problem(path: Path, relative: str) -> str | None:
    """Why `path` is not the manifest's `relative` file (missing / wrong size / wrong checksum), or None."""
    expected = manifest().get(relative)
    if not _probe(Path.is_file, path):
        return "missing"
    if expected is None:
        return None
    size, sha = expected
    actual = path.stat().st_size
    if actual != size:
        return f"{actual} bytes, expected {size} (truncated or altered)"
    if sha256_file(path) != sha:
        return "checksum mismatch (altered or corrupted)"
    return None


_verified: set[tuple[str, float, int]] = set()


def verified_path(root: Path, relative: str) -> Path:
    """`root/relative`, checked against the manifest; raises a one-line UserError when it is not right.

    A file is hashed once per process (keyed by path, mtime and size), so repeated evaluations during
    training pay nothing.
    """
    path = root / relative
    if not _probe(Path.is_dir, root):
        raise UserError(
            f"data directory {root} does not exist: run `sweep data fetch` (or `sweep data fetch --from DIR` "
            "with a local mirror), or point --data-dir / SWEEP_DATA_DIR at your data"
        )
    if _probe(Path.is_file, path):
        stat = path.stat()
        stamp = (str(path), stat.st_mtime, stat.st_size)
        if stamp in _verified:
            return path
    problem = file_problem(path, relative)
    if problem:
        raise UserError(
            f"data file {path} is {problem}: re-install it with `sweep data fetch --dest {root}` "
            "(add `--from DIR` to copy from a local mirror)"
        )
    stat = path.stat()
    _verified.add((str(path), stat.st_mtime, stat.st_size))
    return path


_sample_noted: set[str] = set()
CORPUS_NAMES = {"wiki1m": FULL_CORPUS, "wiki1m_sample": SAMPLE_CORPUS}


def corpus_path(root: Path, corpus: str | None, note: bool = True) -> Path:
    """The training corpus.

    `wiki1m` (the full corpus, required) or `wiki1m_sample` (the mirror's 11,914 sentences) inside the
    data directory; any other value is a file path; None takes the full corpus when installed, else the
    sample, and says so on stderr once per process unless `note` is False (paper-scale studies name `wiki1m`
    so they never train on the sample).
    """
    if corpus in CORPUS_NAMES:
        relative = CORPUS_NAMES[corpus]
        if not _probe(Path.is_file, root / relative):
            how = "`sweep data fetch --corpus full`" if corpus == "wiki1m" else "`sweep data fetch --from DIR`"
            raise UserError(f"corpus '{corpus}' is not installed in {root}: run {how}")
        return verified_path(root, relative) if relative in manifest() else root / relative
    if corpus:
        path = Path(corpus).expanduser()
        if not _probe(Path.is_file, path):
            raise UserError(f"training corpus {path} not found: fix data.corpus or run `sweep data fetch`")
        return path
    if _probe(Path.is_file, root / FULL_CORPUS):
        return root / FULL_CORPUS
    if _probe(Path.is_file, root / SAMPLE_CORPUS):
        if note and str(root) not in _sample_noted:  # once per process: a dry run resolves the corpus per trial
            import sys

            _sample_noted.add(str(root))
            print(f"note: training on the corpus sample {root / SAMPLE_CORPUS} (the full wiki1m is not installed)",
                  file=sys.stderr)
        return verified_path(root, SAMPLE_CORPUS)
    raise UserError(
        f"no training corpus in {root / 'corpus'}: run `sweep data fetch` (full wiki1m) or "
        "`sweep data fetch --from DIR` (a mirror's sample), or set data.corpus"
    )


# ---- the corpus length, without torch: the study expansion and the dry run plan with it ------------
_counts: dict[tuple[str, int, int, int | None], int] = {}
# SimCSE's wiki1m_for_simcse.txt holds one million sentences (one epoch at batch 64 = 15,625 steps); a dry
# run on a machine where it is not installed yet still plans with that length.
KNOWN_SENTENCES = {"wiki1m": 1_000_000}


def count_sentences(path: Path, limit: int | None = None) -> int:
    """How many sentences `trainer.corpus.load_corpus` reads from `path` (non-empty lines, at most
    `limit`), without tokenising; cached per file state, so a dry run over many trials reads it once."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, int(stat.st_mtime), limit)
    if key not in _counts:
        count = 0
        try:
            with open(path, encoding="utf-8") as handle:
                for line in handle:
                    if line.strip():
                        count += 1
                        if limit is not None and count >= limit:
                            break
        except (OSError, UnicodeDecodeError) as exc:  # trainer.corpus.load_corpus reads it the same way
            why = exc.strerror if isinstance(exc, OSError) else f"not UTF-8 text ({exc.reason} at byte {exc.start})"
            raise UserError(f"cannot read the training corpus {excerpt(str(path), 120)}: {why}; "
                            "fix data.corpus") from None
        _counts[key] = count
    return _counts[key]


def planned_steps(config: dict, sentences: int | None = None) -> int | None:
    """The optimiser steps a resolved run config will take: `max_steps`, else `epochs` passes of drop-last batches
    over the corpus (`sentences` of it as loaded, else counted from the file, max_sentences applied); None when the
    corpus is not installed. trainer.run_plan.RunPlan, which the trainer runs by, takes its steps from here."""
    if config.get("max_steps"):
        return int(config["max_steps"])
    data = config.get("data") or {}
    if sentences is None:
        sentences = _corpus_sentences(data)
        if sentences is None:
            return None
    steps = config.get("epochs", 1.0) * (sentences // config["batch_size"])
    if not math.isfinite(steps) or steps >= 2**63:  # RunConfig bounds epochs; a corpus of 10^13 lines might not
        raise ConfigError("epochs", f": expected fewer epochs: {config.get('epochs')} passes of "
                          f"{sentences // config['batch_size']} steps are more than a run can count; or set max_steps")
    return max(1, int(steps))


def _corpus_sentences(data: dict) -> int | None:
    """The sentences a run of the `data` section reads (max_sentences applied), counted from the installed corpus
    or, where it is not installed, from the size of a corpus the project knows; None otherwise."""
    limit = data.get("max_sentences")
    try:
        return count_sentences(corpus_path(data_dir(data.get("data_dir")), data.get("corpus"), note=False),
                               limit)  # a lookup, not the run: no note
    except UserError:
        known = KNOWN_SENTENCES.get(data.get("corpus"))
        if known is None:
            return None
        return min(known, limit) if limit else known
