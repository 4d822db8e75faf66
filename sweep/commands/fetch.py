"""`sweep data fetch`: install the SentEval data and a training corpus into the data directory.

Sources: the public archives SimCSE uses (`senteval.tar`, `wiki1m_for_simcse.txt`) or, with
`--from DIR`, a local mirror laid out as a data directory is (senteval/, corpus/): another machine's data
directory will do. Every file in the project's manifest (trainer/data_manifest.tsv) is checked for size and
sha256; a file is written under a temporary name and moved into place only once verified, so a half-written or
corrupted file is never left where a reader would use it. Files already installed and verified are skipped (the
command is idempotent).
"""

from __future__ import annotations

import shutil
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from trainer.data import (
    FULL_CORPUS,
    SAMPLE_CORPUS,
    data_dir,
    file_problem,
    manifest,
    sha256_file,
)
from trainer.errors import UserError
from trainer.files import write_atomic

SENTEVAL_URL = "https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/senteval.tar"
WIKI1M_URL = "https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/wiki1m_for_simcse.txt"
# Top-level SentEval task folders; an archive member is mapped to senteval/<folder>/... by the first of these
# names in its path (SimCSE's tar nests them under downstream/).
_TASK_FOLDERS = ("STS", "SICK", "MR", "CR", "SUBJ", "MPQA", "SST", "TREC", "MRPC")


def fetch_data(source: str | None = None, dest: str | None = None, corpus: str = "auto") -> Path:
    """Install the evaluation data (and a corpus) into `dest`; returns the data directory."""
    root = data_dir(dest)
    mirror = Path(source).expanduser() if source else None
    corpus_files = {"auto": [SAMPLE_CORPUS, FULL_CORPUS], "sample": [SAMPLE_CORPUS], "full": [FULL_CORPUS],
                    "none": []}[corpus]
    _refuse_before_writing(root, mirror, corpus, corpus_files)
    root.mkdir(parents=True, exist_ok=True)
    senteval_files = sorted(p for p in manifest() if p.startswith("senteval/"))
    todo = [p for p in senteval_files if file_problem(root / p, p) is not None]
    if todo:
        _progress(f"installing {len(todo)} of {len(senteval_files)} SentEval files into {root}")

    if mirror is not None:
        for i, relative in enumerate(todo, 1):
            install_file(mirror / relative, root, relative)
            _progress(f"copied {i}/{len(todo)} files")
        if todo:
            _log("")
        for relative in corpus_files:
            if (mirror / relative).is_file() and file_problem(root / relative, relative) is not None:
                install_file(mirror / relative, root, relative)
    else:
        if todo:
            _install_senteval_archive(root, todo)
        if corpus in ("auto", "full") and not (root / FULL_CORPUS).is_file():
            _download(WIKI1M_URL, root / FULL_CORPUS, verify=lambda path: _check_nonempty(path))

    missing = [p for p in senteval_files if file_problem(root / p, p) is not None]
    if missing:  # pragma: no cover - every path above verifies what it installs
        raise UserError(f"{len(missing)} files could not be installed, e.g. {missing[0]}; run the command again")
    _log(f"ok: {len(senteval_files)} SentEval files verified (size and sha256) in {root / 'senteval'}")
    for relative in (FULL_CORPUS, SAMPLE_CORPUS):
        if (root / relative).is_file():
            _log(f"ok: corpus {root / relative} ({_count_lines(root / relative):,} sentences)")
    return root


def _refuse_before_writing(root: Path, mirror: Path | None, corpus: str, corpus_files: list[str]) -> None:
    """The mistakes found without copying or downloading anything, refused before the data directory is touched."""
    if mirror is not None and not (mirror / "senteval").is_dir():
        raise UserError(f"--from {mirror}: no senteval/ folder there; pass a folder laid out as a data directory "
                        "(senteval/, corpus/), such as another machine's data directory")
    if mirror is not None and corpus in ("sample", "full") and not (mirror / corpus_files[0]).is_file():
        raise UserError(f"--from {mirror}: no {corpus_files[0]} there; choose --corpus with one the mirror has")
    if mirror is None and corpus == "sample" and file_problem(root / SAMPLE_CORPUS, SAMPLE_CORPUS) is not None:
        raise UserError("--corpus sample comes from a mirror only (corpus/wiki1m_sample.txt): add `--from DIR` "
                        "with a mirror that holds it, or choose --corpus full")


# ---- installing one file ----------------------------------------------------------------------
def install_file(src: Path, root: Path, relative: str) -> None:
    if not src.is_file():
        raise UserError(f"mirror file {src} is missing: the mirror is incomplete; fix it or fetch without --from")
    def copy_verified(tmp: Path) -> None:
        shutil.copyfile(src, tmp)
        _verify_or_raise(tmp, relative, origin=str(src))

    write_atomic(root / relative, copy_verified)


def _verify_or_raise(path: Path, relative: str, origin: str) -> None:
    expected = manifest().get(relative)
    if expected is None:
        return
    size, sha = expected
    if path.stat().st_size != size:
        raise UserError(f"{origin} has {path.stat().st_size} bytes, expected {size}: the source is truncated or "
                        "altered; repair the mirror (or fetch from the public archives without --from)")
    if sha256_file(path) != sha:
        raise UserError(f"{origin} fails its sha256 check: the source is altered or corrupted; repair the mirror "
                        "(or fetch from the public archives without --from)")


# ---- downloads --------------------------------------------------------------------------------
def _install_senteval_archive(root: Path, todo: list[str]) -> None:
    wanted = set(todo)
    with tempfile.TemporaryDirectory(dir=root) as tmpdir:
        archive = Path(tmpdir) / "senteval.tar"
        _download(SENTEVAL_URL, archive, verify=_check_nonempty)
        try:
            with tarfile.open(archive) as tar:
                for member in tar:
                    relative = _senteval_relative(member.name)
                    if not member.isfile() or relative not in wanted:
                        continue
                    def extract_verified(tmp: Path, member=member, relative=relative) -> None:
                        with tar.extractfile(member) as src, open(tmp, "wb") as out:
                            shutil.copyfileobj(src, out)
                        _verify_or_raise(tmp, relative, origin=f"senteval.tar:{member.name}")

                    write_atomic(root / relative, extract_verified)
                    wanted.discard(relative)
        except tarfile.TarError as exc:
            raise UserError(f"downloaded senteval.tar is not a valid archive ({exc}); run the command again") from None
    if wanted:
        raise UserError(f"senteval.tar lacks {len(wanted)} expected files, e.g. {sorted(wanted)[0]}; "
                        "use --from DIR with a mirror")


def _senteval_relative(member_name: str) -> str | None:
    parts = Path(member_name).parts
    for i, part in enumerate(parts):
        if part in _TASK_FOLDERS:
            return "/".join(("senteval",) + parts[i:])
    return None


def _download(url: str, target: Path, verify) -> None:
    write_atomic(target, lambda tmp: _download_to(url, tmp, target.name, verify))


def _download_to(url: str, tmp: Path, name: str, verify) -> None:
    try:
        response = urllib.request.urlopen(url, timeout=30)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UserError(
            f"cannot download {url} ({reason}): check the network, or install from a local mirror with "
            "`sweep data fetch --from DIR`"
        ) from None
    total = int(response.headers.get("Content-Length") or 0)
    done, started = 0, time.monotonic()
    try:
        with response, open(tmp, "wb") as out:
            while block := response.read(1 << 20):
                out.write(block)
                done += len(block)
                rate = done / max(time.monotonic() - started, 1e-6) / 1e6
                pct = f"{100 * done / total:5.1f}% of {total / 1e6:.1f} MB" if total else f"{done / 1e6:.1f} MB"
                _progress(f"downloading {name}: {pct} ({rate:.1f} MB/s)")
    except (urllib.error.URLError, OSError) as exc:
        raise UserError(f"download of {url} broke off ({exc}); "
                        "run the command again (it resumes from scratch)") from None
    _log("")
    if total and done != total:
        raise UserError(f"download of {url} is incomplete ({done} of {total} bytes); run the command again")
    verify(tmp)


def _check_nonempty(path: Path) -> None:
    if path.stat().st_size == 0:
        raise UserError(f"downloaded file {path.name} is empty; run the command again")


# ---- output -----------------------------------------------------------------------------------
def _count_lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 20), b""))


def _progress(text: str) -> None:
    if sys.stderr.isatty():
        print(f"\r{text}", end="", file=sys.stderr, flush=True)


def _log(text: str) -> None:
    if text or sys.stderr.isatty():
        print(text, file=sys.stderr, flush=True)
