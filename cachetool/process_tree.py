"""The processes a verb starts, found and ended through Linux's ``/proc``.

Two ways to end them, both SIGTERM, a grace period, then SIGKILL:

- :func:`end_group`: a child started in a process group of its own (``start_new_session``) is ended with every
  process it started, however deep (the vLLM child: vLLM's EngineCore, its workers and their compile jobs inherit
  the group), also those already orphaned to init;
- :func:`end_descendants`: the processes named by identity (:func:`descendants` taken when a stop signal came,
  before any cleanup orphaned them) and those started since: what a stopped verb leaves of the work it started
  itself (Inductor's compile jobs, tensor-parallel ranks).

A process is named by its pid and its start time (``/proc/PID/stat``), so that a pid the kernel has reused is never
signalled; a zombie counts as gone (its parent reaps it: in a container, init may never do so). A process that
ignores SIGTERM has asked to outlive a stop (multiprocessing's resource tracker, which ends when its parent does):
:func:`end` leaves it alone. Without ``/proc`` (not Linux) no descendant is found and a group is probed with
signal 0.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = [
    "Process",
    "adopting_orphans",
    "clock_ticks",
    "descendants",
    "die_with_parent",
    "end",
    "end_descendants",
    "end_group",
    "table",
]

PROC = Path("/proc")
GROUP_GRACE = 4.0  # SIGTERM -> SIGKILL for a child's group: vLLM's EngineCore defers SIGTERM while it compiles
GRACE = 2.0  # SIGTERM -> SIGKILL for a stopped verb's leftovers
KILL_WAIT = 1.0  # after SIGKILL: the kernel's part
SETTLE = 0.3  # end_descendants: a scan this long after an end that finds no new process ends it
SETTLE_LIMIT = 5.0
POLL = 0.05

Identity = tuple[int, int]  # (pid, start time in clock ticks since boot)


@dataclasses.dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    pgid: int
    state: str  # "Z": a zombie
    start: int  # clock ticks since boot

    @property
    def identity(self) -> Identity:
        return self.pid, self.start


def _read(pid: int) -> Process | None:
    try:
        stat = (PROC / str(pid) / "stat").read_bytes()
    except OSError:  # gone, or not ours to read
        return None
    fields = stat.rsplit(b")", 1)[1].split()  # after the command name, which may hold spaces and parentheses
    return Process(pid, int(fields[1]), int(fields[2]), fields[0].decode(), int(fields[19]))


def table() -> dict[int, Process]:
    """Every process this one may see, by pid (empty without ``/proc``)."""
    try:
        pids = [int(n) for n in os.listdir(PROC) if n.isdigit()]
    except OSError:
        return {}
    return {p.pid: p for p in map(_read, pids) if p is not None}


def clock_ticks() -> int:
    """Now, in the unit of a process's start time (clock ticks since boot; 0 without ``/proc``)."""
    try:
        uptime = float((PROC / "uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0
    return int(uptime * os.sysconf("SC_CLK_TCK"))


def descendants(pid: int | None = None, *, since: int = 0) -> set[Identity]:
    """The live processes below ``pid`` (default: this one), children of children included, started at or after
    ``since`` (:func:`clock_ticks`)."""
    procs = table()
    children: dict[int, list[Process]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p)
    out: set[Identity] = set()
    todo = [os.getpid() if pid is None else pid]
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child.pid)
            if child.start >= since and child.state != "Z":
                out.add(child.identity)
    return out


def _alive(identities: Iterable[Identity]) -> set[Identity]:
    procs = table()
    return {i for i in identities if (p := procs.get(i[0])) is not None and p.start == i[1] and p.state != "Z"}


def _ignores_sigterm(pid: int) -> bool:
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    except (OSError, ValueError, IndexError):
        pass
    return False


def _signal(identities: Iterable[Identity], sig: int) -> None:
    for pid, _ in identities:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _wait_until(done: Callable[[], bool], seconds: float) -> bool:
    end_at = time.monotonic() + seconds
    while not done():
        if time.monotonic() >= end_at:
            return False
        time.sleep(POLL)
    return True


def end(identities: Iterable[Identity], grace: float | None = None) -> set[Identity]:
    """End the processes ``identities`` names that still run (but those that ignore SIGTERM): SIGTERM, up to
    ``grace`` seconds (:data:`GRACE`), then SIGKILL; returns those still running after that (none, unless one is
    stuck in the kernel)."""
    grace = GRACE if grace is None else grace
    targets = {i for i in _alive(identities) if not _ignores_sigterm(i[0])}
    if not targets:
        return set()
    _signal(targets, signal.SIGTERM)
    if _wait_until(lambda: not _alive(targets), grace):
        return set()
    _signal(_alive(targets), signal.SIGKILL)
    _wait_until(lambda: not _alive(targets), KILL_WAIT)
    return _alive(targets)


def end_descendants(since: int, known: Iterable[Identity] = (), grace: float | None = None) -> set[Identity]:
    """End this process's descendants started since ``since`` and the processes ``known`` names (:func:`end`), and
    again those that appear meanwhile (a thread of this process may start one more job as it is stopped: a kernel
    build it had taken from its queue), until a scan finds none for :data:`SETTLE` s or :data:`SETTLE_LIMIT` s have
    passed. Returns those still running."""
    left: set[Identity] = set()
    targets = set(known) | descendants(since=since)
    give_up = time.monotonic() + SETTLE_LIMIT
    while targets:
        left |= end(targets, grace)
        time.sleep(SETTLE)
        targets = {i for i in descendants(since=since) if not _ignores_sigterm(i[0])} - left
        if time.monotonic() >= give_up:
            left |= targets
            break
    return _alive(left)


def _group_alive(pgid: int) -> bool:
    if PROC.is_dir():
        return any(p.pgid == pgid and p.state != "Z" for p in table().values())
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def end_group(pgid: int, grace: float | None = None) -> bool:
    """End every process of the group ``pgid`` (a child started with ``start_new_session``: its pid): SIGTERM, up
    to ``grace`` seconds (:data:`GROUP_GRACE`), then SIGKILL. True when none is left running."""
    grace = GROUP_GRACE if grace is None else grace
    if not _group_alive(pgid):
        return True
    _signal_group(pgid, signal.SIGTERM)
    if _wait_until(lambda: not _group_alive(pgid), grace):
        return True
    _signal_group(pgid, signal.SIGKILL)
    return _wait_until(lambda: not _group_alive(pgid), KILL_WAIT)


def adopting_orphans(adopt: bool = True) -> None:
    """Linux: while ``adopt``, a descendant whose parent ends is re-parented to this process instead of to init
    (``PR_SET_CHILD_SUBREAPER``), so that a stop still finds the job a worker started just as it was ended (a
    kernel build): :func:`end_descendants` walks this process's tree. Elsewhere, nothing."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1 if adopt else 0, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def die_with_parent() -> None:
    """In a child, before exec: Linux sends it SIGTERM when its parent dies (``PR_SET_PDEATHSIG``), so that a
    cachetool killed outright (SIGKILL) does not leave the child running. (What the child started is ended by
    cachetool's :func:`end_group`, which only a SIGKILL skips.)"""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
