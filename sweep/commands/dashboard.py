"""`sweep dashboard STUDY`: serve optuna-dashboard on the study's Optuna storage.

Bound to 127.0.0.1 unless --host says otherwise (the dashboard has no authentication and can edit
notes and trials). Figures that `sweep analyze` attached as study artifacts are served from
<study_dir>/artifacts.
"""

from __future__ import annotations

import errno
from pathlib import Path

from sweep.records.store import locate_study
from trainer.errors import UserError


def serve_dashboard(study: str, host: str = "127.0.0.1", port: int = 8080) -> int:
    """Serve the dashboard until Ctrl-C; return 0."""
    location = locate_study(study)
    url = location.storage
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).is_file():
        raise UserError(f"study '{location.name}' has no Optuna storage yet ({url}); start it with `sweep run`")
    import optuna
    from optuna.artifacts import FileSystemArtifactStore
    from optuna_dashboard import run_server

    from sweep.records.mirror import open_storage
    from sweep.text import hide_password

    storage = open_storage(url)
    try:
        optuna.load_study(study_name=location.name, storage=storage)
    except KeyError:
        raise UserError(f"no Optuna study named '{location.name}' in {hide_password(url)}; "
                        "start it with `sweep run`") from None
    artifacts = location.folder.artifacts_dir
    artifacts.mkdir(parents=True, exist_ok=True)
    shown_host = f"[{host}]" if ":" in host else host
    print(f"optuna-dashboard for study '{location.name}' ({hide_password(url)}): "
          f"http://{shown_host}:{port}/dashboard   (Ctrl-C to stop)", flush=True)
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: listening on {host}: anyone who can reach this address can read and edit the study",
              flush=True)
    try:
        run_server(storage, host=host, port=port, artifact_store=FileSystemArtifactStore(str(artifacts)))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise UserError(f"port {port} on {host} is already in use; pass another one with --port") from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise UserError(f"cannot listen on {host}: no such address on this machine (--host)") from None
        raise
    except KeyboardInterrupt:
        pass
    return 0
