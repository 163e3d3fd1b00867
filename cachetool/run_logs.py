"""Where the log of a run that cachetool starts (vLLM's, a torch program's) goes, and how many are kept.

Each run gets a new file ``{kind}-{time}-{pid}.log`` in ``$XDG_STATE_HOME/cachetool/logs/`` (default
``~/.local/state/cachetool/logs/``): a place a user finds again (every result and failure names its log), that
outlives the temporary folder, and that does not grow: the newest :data:`KEEP` logs of each kind stay, older ones
are removed when a new one is made. Where that folder cannot be made (a read-only home in a hardened pod), the
temporary folder takes the log instead."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from cachetool import envs

KEEP = 20


def log_dir() -> Path:
    state = envs.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "cachetool" / "logs"


def new_log(kind: str) -> Path:
    """A new, empty log file for a run of ``kind`` (``vllm-warm``, ``torch-check``, ...), the older ones of that
    kind beyond :data:`KEEP` removed."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    try:
        folder = log_dir()
        folder.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f"{kind}-{stamp}-", suffix=".log", dir=folder)
    except OSError:
        fd, name = tempfile.mkstemp(prefix=f"cachetool-{kind}-", suffix=".log")
        folder = None
    os.close(fd)
    if folder is not None:
        _rotate(folder, kind)
    return Path(name)


def _rotate(folder: Path, kind: str) -> None:
    dated = []
    for p in folder.glob(f"{kind}-*.log"):
        try:
            dated.append((p.stat().st_mtime, p.name, p))
        except OSError:  # removed meanwhile by another run's rotation
            continue
    for _t, _n, old in sorted(dated)[:-KEEP]:
        try:
            old.unlink()
        except OSError:
            pass
