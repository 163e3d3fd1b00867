"""vLLM's log of a headless start, read: its path for a message (:func:`log_note`), its lines, and the line that
names vLLM's error (:func:`last_log_error`, what a child that exited before reporting is failed with)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import BinaryIO


def log_note(log: BinaryIO) -> str:
    """`` (log: PATH)`` for a named log file; nothing for an unlinked one."""
    name = getattr(log, "name", None)
    return f" (log: {name})" if isinstance(name, str) and os.path.exists(name) else ""


def log_lines(log: BinaryIO | Path) -> list[str]:
    try:
        if isinstance(log, Path):
            return log.read_text(errors="replace").splitlines()
        log.flush()
        log.seek(0)
        return log.read().decode(errors="replace").splitlines()
    except OSError:
        return []


def last_log_error(log: BinaryIO | Path) -> str:
    """The last line of vLLM's log that names an error, else its last line."""
    lines = [ln.strip() for ln in log_lines(log) if ln.strip()]
    for ln in reversed(lines):
        if re.search(r"(Error|Exception|error:)", ln):
            return ln[-300:]
    return lines[-1][-300:] if lines else "(empty log)"
