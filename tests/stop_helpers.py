"""What the stop-signal tests share: a ``cachetool`` process started in a session of its own, a C++ compiler that
holds every kernel build until the test has stopped the start (so that the signal comes while the start compiles,
however fast the machine or the suite's ccache), and a look at ``/proc`` that does not use the code under test.

Every process a start makes lives in its session or in a session one of them made (the vLLM child's): after the
signal, none of them may run 10 s later (a zombie waiting for init to reap it does not run)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEADLINE = 10.0  # issue 34: every process of a stopped start gone within 10 s of the signal

# A g++ that marks the first kernel build and holds every build (a compile of a .cpp) for a minute; other calls
# (Inductor's version probe) go to the real compiler at once.
SLOW_GXX = """#!/bin/sh
case "$*" in
  *.cpp*) touch "$CACHETOOL_TEST_COMPILING"; sleep 60 ;;
esac
exec "${CACHETOOL_TEST_REAL_CXX:-/usr/bin/g++}" "$@"
"""


def slow_compiler_env(folder: Path, env: dict[str, str]) -> tuple[dict[str, str], Path]:
    """``env`` with the held g++ first on PATH; returns it and the file its first kernel build creates."""
    bin_dir = folder / "slow-bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    gxx = bin_dir / "g++"
    gxx.write_text(SLOW_GXX)
    gxx.chmod(0o755)
    mark = folder / "compiling"
    return {**env, "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", "CACHETOOL_TEST_COMPILING": str(mark)}, mark


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    """``cachetool ARGS`` in a session of its own (SIGINT reaches it whatever the shell that ran the tests did)."""
    return subprocess.Popen(
        [sys.executable, "-m", "cachetool", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(REPO),
        start_new_session=True,
        stdin=subprocess.DEVNULL,
    )


def wait_for(what: Path | str, proc: subprocess.Popen, timeout: float) -> None:
    """Wait until the file ``what`` exists, or (a string) a process below ``proc`` whose command line holds it."""
    end = time.monotonic() + timeout
    name = what.name if isinstance(what, Path) else what
    while not (what.exists() if isinstance(what, Path) else any(what in p.cmd for p in tree(proc.pid))):
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"cachetool ended (exit {proc.returncode}) before {name}:\n{err[-3000:]}")
        if time.monotonic() > end:
            _kill(tree(proc.pid))
            proc.kill()
            proc.communicate()
            raise AssertionError(f"no {name} within {timeout:g} s")
        time.sleep(0.1)


@dataclasses.dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    sid: int
    state: str
    cmd: str


def processes() -> dict[int, Proc]:
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            cmd = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        rest = stat.rsplit(")", 1)[1].split()
        out[int(name)] = Proc(int(name), int(rest[1]), int(rest[3]), rest[0], cmd.strip()[:160])
    return out


def tree(pid: int) -> list[Proc]:
    procs = processes()
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for p in procs.values():
            if p.ppid == parent:
                found.append(p)
                todo.append(p.pid)
    return found


@dataclasses.dataclass
class Stopped:
    rc: int
    out: str
    err: str
    exit_seconds: float  # signal -> cachetool's exit
    tree: list[Proc]  # its processes when the signal came
    left: list[Proc]  # those of its sessions still running DEADLINE s after the signal

    def one_json(self) -> dict:
        lines = [ln for ln in self.out.splitlines() if ln.strip()]
        assert len(lines) == 1, self.out
        return json.loads(lines[0])

    def error_line(self) -> str:
        lines = [ln for ln in self.err.splitlines() if ln.startswith("error: ")]
        assert len(lines) == 1 and "Traceback" not in self.err, self.err[-3000:]
        return lines[0]


def stop(proc: subprocess.Popen, sig: signal.Signals) -> Stopped:
    """Send ``sig`` to the cachetool process (only to it, as Kubernetes does), then wait for it and for every
    process of its sessions to end."""
    before = tree(proc.pid)
    sessions = {proc.pid} | {p.sid for p in before}
    t0 = time.monotonic()
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # it did not stop: the test fails, and ends it itself
        _kill(_running(sessions))
        out, err = proc.communicate()
    exit_seconds = time.monotonic() - t0
    left = _running(sessions)
    while left and time.monotonic() - t0 < DEADLINE:
        time.sleep(0.1)
        left = _running(sessions)
    _kill(left)  # nothing of the test outlives it
    return Stopped(proc.returncode, out, err, exit_seconds, before, left)


def run_out(proc: subprocess.Popen, timeout: float = 900) -> Stopped:
    """Wait for the cachetool process to end by itself (its ``--timeout``), watching its processes as it goes:
    ``tree`` is what ran at the last look, ``left`` what of its sessions still runs :data:`DEADLINE` s after."""
    seen: list[Proc] = []
    sessions = {proc.pid}
    end = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < end:
        seen = tree(proc.pid) or seen
        sessions |= {p.sid for p in seen}
        time.sleep(0.2)
    if proc.poll() is None:  # it did not end: the test fails, and ends it itself
        _kill(_running(sessions))
        proc.kill()
    out, err = proc.communicate()
    t0 = time.monotonic()
    left = _running(sessions)
    while left and time.monotonic() - t0 < DEADLINE:
        time.sleep(0.1)
        left = _running(sessions)
    _kill(left)
    return Stopped(proc.returncode, out, err, 0.0, seen, left)


def _running(sessions: set[int]) -> list[Proc]:
    return [p for p in processes().values() if p.sid in sessions and p.state != "Z"]


def _kill(procs: list[Proc]) -> None:
    for p in procs:
        try:
            os.kill(p.pid, signal.SIGKILL)
        except OSError:
            pass
