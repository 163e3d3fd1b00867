"""Marks on a vLLM cache root for the starts that have not finished: what ``pack`` reads to refuse what an
interrupted warm left.

vLLM fills a key folder piece by piece (Inductor's kernels as they compile, its AOT artifact at the end), and
nothing in the folder says whether the start that wrote it finished (the native engine's index does:
:func:`compiler.artifacts.incomplete_reason`). So every start on a root (``warm``, ``check``) marks the root before
vLLM starts, with a file of its own, ``{root}/.cachetool-incomplete/{id}.json``::

    {"command": "warm", "pid": 123, "host": "h", "process_start": <clock ticks>, "started": <epoch seconds>,
     "folders": null | ["torch_compile_cache/torch_aot_compile/<key>", ...]}

- a start that completes removes its mark; the key folders it wrote are complete now (vLLM finished them), so a
  mark of an earlier start loses those folders, and goes when it names no other;
- a start that fails or is stopped (SIGINT, SIGTERM) writes into its mark the key folders whose files changed
  since it began; one that changed none removes its mark (the root is as it was);
- a start killed outright (SIGKILL, a lost node) leaves its mark naming no folder, and every unit of the root is
  refused: the next start on the root, before vLLM starts, gives such a mark of a start that no longer runs the
  folders changed since it began (nothing else has written since), and the rules above apply.

:func:`incomplete_reason` (the vLLM layout's rule, which ``pack`` applies) refuses a unit in a folder a mark names,
and every unit while a mark names no folder (a start running, or killed), naming the mark. Removing the folders a
mark names, then the mark, is the way out by hand.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from cachetool import process_tree
from cachetool.atomic import atomic_write
from cachetool.engines.root_names import AOT, INCOMPLETE_DIR, TCC
from cachetool.engines.vllm.jit_caches import FOLDERS as JIT_FOLDERS
from cachetool.engines.vllm.root_names import MODELINFOS

__all__ = ["Mark", "incomplete_reason", "marked", "touched_since"]

# A file's time stamp and the clock that dates a mark may disagree by a little (a coarse file system clock): a
# folder changed this long before a start counts as changed by it.
SLACK_NS = 2_000_000_000


@dataclasses.dataclass
class Mark:
    """One start's mark (see the module doc); ``folders`` None: the start runs, or was killed."""

    path: Path
    command: str
    pid: int
    host: str
    process_start: int
    started: float
    folders: list[str] | None = None

    @classmethod
    def new(cls, root: Path, command: str) -> Mark:
        me = process_tree.table().get(os.getpid())
        return cls(
            root / INCOMPLETE_DIR / f"{command}-{uuid.uuid4().hex[:12]}.json",
            command,
            os.getpid(),
            socket.gethostname(),
            me.start if me else 0,
            time.time(),
        )

    @classmethod
    def read(cls, path: Path) -> Mark:
        """The mark in ``path``; one that cannot be read names no folder (the whole root is refused) and no start
        time (no later start settles it)."""
        try:
            d = json.loads(path.read_text())
            folders = d.get("folders")
            return cls(
                path,
                str(d["command"]),
                int(d["pid"]),
                str(d["host"]),
                int(d["process_start"]),
                float(d["started"]),
                [str(f) for f in folders] if isinstance(folders, list) else None,
            )
        except (OSError, ValueError, KeyError, TypeError):
            return cls(path, "start", 0, "?", 0, 0.0)

    def write(self) -> None:
        doc = {
            "command": self.command,
            "pid": self.pid,
            "host": self.host,
            "process_start": self.process_start,
            "started": self.started,
            "folders": self.folders,
        }
        atomic_write(self.path, json.dumps(doc, sort_keys=True).encode(), fsync=False)

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        with contextlib.suppress(OSError):  # the folder goes with its last mark
            self.path.parent.rmdir()

    def keep_or_remove(self) -> None:
        """Write the mark with its folders, or remove it when it names none (nothing left unfinished)."""
        if self.folders:
            self.write()
        else:
            self.remove()

    def running(self) -> bool:
        """The start that wrote the mark still runs (on this host: its pid with its start time); a start on
        another host is taken for gone."""
        if self.host != socket.gethostname():
            return False
        p = process_tree.table().get(self.pid)
        return p is not None and p.start == self.process_start and p.state != "Z"

    def describe(self) -> str:
        if not self.started:
            return f"a mark of a start that cachetool cannot read: remove it if no start runs on the root ({self.path})"
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started)) if self.started else "?"
        who = f"a {self.command} started {when} (pid {self.pid} on {self.host})"
        if self.folders is None:
            return f"{who} has not finished: it runs, or was killed (mark: {self.path})"
        return f"{who} stopped before it finished this folder (mark: {self.path})"


def marks(root: Path) -> list[Mark]:
    folder = root / INCOMPLETE_DIR
    return [Mark.read(p) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def key_folders(root: Path) -> list[str]:
    """The key folders of a vLLM root, relative to it: ``torch_compile_cache/torch_aot_compile/<key>`` and the
    piecewise ``torch_compile_cache/<hash>``."""
    tcc = root / TCC
    out: list[str] = []
    for top, rel in ((tcc / AOT, f"{TCC}/{AOT}"), (tcc, TCC)):
        if top.is_dir():
            out += [
                f"{rel}/{c.name}" for c in sorted(top.iterdir()) if c.is_dir() and not c.is_symlink() and c.name != AOT
            ]
    return out


def _changed_since(folder: Path, since_ns: int) -> bool:
    """Whether anything in ``folder`` (the folder itself included) was written at or after ``since_ns``; an entry
    that vanishes on the way is skipped."""
    try:
        if folder.stat().st_mtime_ns >= since_ns:
            return True
    except FileNotFoundError:
        return False
    stack = [folder]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for e in entries:
                    try:
                        if e.stat(follow_symlinks=False).st_mtime_ns >= since_ns:
                            return True
                        if e.is_dir(follow_symlinks=False):
                            stack.append(Path(e.path))
                    except FileNotFoundError:
                        continue
        except (FileNotFoundError, NotADirectoryError):
            continue
    return False


def touched_since(root: Path, started: float) -> list[str]:
    """The key folders of ``root`` written at or after ``started`` (epoch seconds), less :data:`SLACK_NS`."""
    since = int(started * 1e9) - SLACK_NS
    return [rel for rel in key_folders(root) if _changed_since(root / rel, since)]


def _settle_killed(root: Path, mine: Mark) -> None:
    """Give the mark of a start killed outright (no folders, not running) the folders changed since it began."""
    for m in marks(root):
        if m.path != mine.path and m.folders is None and m.started and not m.running():
            m.folders = touched_since(root, m.started)
            m.keep_or_remove()


def _settle_completed(root: Path, started: float) -> None:
    """A start that began at ``started`` completed: the folders it wrote are whole, and the earlier marks lose
    them (the tree is walked only when there are such marks)."""
    earlier = [m for m in marks(root) if m.folders is not None]
    done = touched_since(root, started) if earlier else []
    for m in earlier:
        m.folders = [f for f in m.folders if f not in done]  # type: ignore[union-attr]  # baseline (issue 46)
        m.keep_or_remove()


@contextlib.contextmanager
def marked(root: Path, command: str) -> Iterator[Mark]:
    """The block (a start of vLLM on ``root``) under its mark, settled as the module doc says when the block ends.
    A root the block removed (a failed start removes a root it created) is left removed."""
    mark = Mark.new(root, command)
    _settle_killed(root, mark)
    mark.write()
    try:
        yield mark
    except BaseException:
        if root.is_dir():
            mark.folders = touched_since(root, mark.started)
            mark.keep_or_remove()
        raise
    mark.remove()
    _settle_completed(root, mark.started)


def _root_of(unit_dir: Path) -> tuple[Path, str] | None:
    """The cache root above an install unit's folder and the unit's path in it (None: not in a root's tree)."""
    parts = unit_dir.parts
    if TCC in parts:
        i = len(parts) - 1 - parts[::-1].index(TCC)
        return Path(*parts[:i]), "/".join(parts[i:])
    if unit_dir.name in (MODELINFOS, *JIT_FOLDERS):
        return unit_dir.parent, unit_dir.name
    return None


def incomplete_reason(unit_dir: Path) -> str | None:
    """Why the install unit in ``unit_dir`` is not complete by its root's marks, or None (see the module doc)."""
    where = _root_of(Path(unit_dir))
    if where is None:
        return None
    root, rel = where
    for m in marks(root):
        if m.folders is None or any(rel == f or rel.startswith(f + "/") for f in m.folders):
            return m.describe()
    return None
