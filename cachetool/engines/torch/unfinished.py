"""A ``--engine torch`` start that did not finish, and what it may have cut short.

Inductor writes its FX-graph and AOTAutograd entries and its generated code whole (written aside, renamed into
place), and Triton its kernels; but Inductor links a C++ kernel library straight to its final name, and any later
start loads whatever file has that name. A start stopped, failed or killed while a library was linked could leave
a cut one in the root. So every start marks the root before the program runs, with a file of its own,
``{root}/.cachetool-incomplete/torch-{id}.json`` (its pid, the pid's start time, its own start time), and

- a start that completes removes its mark;
- a start that fails or is stopped first removes the kernels it built (C++ libraries and Triton kernels newer than
  its mark: a graph entry that names one builds it again), then its mark;
- a start killed outright leaves its mark: the next start on the root settles it the same way before its program
  runs, and until then ``pack`` refuses the root naming the mark (the layout's ``incomplete_reason``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import time
import uuid
from pathlib import Path

from cachetool import process_tree
from cachetool.atomic import atomic_write
from cachetool.engines.root_names import INCOMPLETE_DIR
from cachetool.engines.torch.layout import MARK_PREFIX, kernel_files, marks, read_mark

__all__ = ["begin", "end"]

SLACK = 2.0  # seconds: a file system's clock and the mark's may disagree by a little


def _running(doc: dict) -> bool:
    """The start that wrote the mark still runs (on this host: its pid with its start time)."""
    if doc.get("host") != socket.gethostname():
        return False
    p = process_tree.table().get(int(doc.get("pid") or 0))
    return p is not None and p.start == doc.get("process_start") and p.state != "Z"


def _remove_built(root: Path, since: float) -> int:
    """The kernels built at or after ``since`` (epoch seconds): what a start may have cut short."""
    gone = 0
    for paths in kernel_files(root).values():
        for p in map(Path, paths):
            with contextlib.suppress(FileNotFoundError):
                if p.stat().st_mtime < since - SLACK:
                    continue
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)  # a Triton kernel's folder
                else:
                    p.unlink()
                gone += 1
    return gone


def _remove(mark: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        mark.unlink()
    with contextlib.suppress(OSError):  # the folder goes with its last mark
        mark.parent.rmdir()


def begin(root: Path) -> Path:
    """Settle the marks of starts that no longer run, then mark the root for this start; the mark."""
    for old in marks(root):
        doc = read_mark(old)
        if not _running(doc):
            _remove_built(root, _started(old, doc))
            _remove(old)
    me = process_tree.table().get(os.getpid())
    mark = Path(root) / INCOMPLETE_DIR / f"{MARK_PREFIX}{uuid.uuid4().hex[:12]}.json"
    mark.parent.mkdir(exist_ok=True)
    doc = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "process_start": me.start if me else 0,
        "started": time.time(),
    }
    atomic_write(mark, json.dumps(doc, sort_keys=True).encode(), fsync=False)
    return mark


def end(root: Path, mark: Path, completed: bool) -> None:
    """This start's end: a start that did not complete removes the kernels it built first."""
    if not completed:
        _remove_built(root, _started(mark, read_mark(mark)))
    _remove(mark)


def _started(mark: Path, doc: dict) -> float:
    """When the start began: its mark says, else (a mark cut short) when the mark was written, else now."""
    try:
        return float(doc["started"])
    except (KeyError, TypeError, ValueError):
        with contextlib.suppress(OSError):
            return mark.stat().st_mtime
        return time.time()
