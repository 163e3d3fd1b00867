"""One set of test servers per pytest run, shared by all its xdist workers and stopped by pid when the run ends.

The controller (the process that runs ``pytest``; with ``-n 0`` the only one) makes the run's server folder and
hands it to its workers (``workerinput``). A server is started by the first process that asks for it, under a file
lock in that folder, which then writes the server's state (ports, paths) there; the others attach to it. Every
server process is written to the folder's ``pids`` file the moment it is spawned (pid, start time, server), so:

- the controller stops them all by pid when the run ends (``pytest_unconfigure``: a failed or interrupted run too;
  a worker leaves early when it runs out of files, so no worker may stop what the others still use);
- a reaper process (its own session, started with the first server) stops them if the controller dies without
  ending the run (SIGTERM, SIGKILL, a CI timeout that kills the job's process group).

A server's start that failed is not retried by the next process that asks; its error is reported there too.
Run as a script (``python tests/server_run.py --reap FOLDER PID:START``) it is that reaper.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest

FOLDER_INPUT = "cachetool_servers"  # the keys of the run's folder and controller in a worker's workerinput
CONTROLLER_INPUT = "cachetool_servers_controller"
STOP_TIMEOUT = 10.0  # seconds from SIGTERM to SIGKILL


def start_time(pid: int) -> int | None:
    """A live process's start time (clock ticks since boot; with the pid it names one process for good), or None
    for a pid that is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, ... starttime is field 22
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _gone(pid: int, started: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is this process's child (-n 0)
    return start_time(pid) != started


def stop_processes(procs: list[tuple[int, int]], timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM each (pid, start time) still alive, then SIGKILL what is left after ``timeout``; a pid that now
    names another process is left alone."""
    alive = [(pid, started) for pid, started in procs if not _gone(pid, started)]
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        for pid, _ in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while alive and time.monotonic() < deadline:
            time.sleep(0.05)
            alive = [(pid, started) for pid, started in alive if not _gone(pid, started)]


class ServerRun:
    """The run's server folder, seen from one process of the run."""

    def __init__(self, folder: Path, controller: str, namespace: str):
        self.folder = folder
        self.controller = controller  # "pid:start time" of the controller (the reaper watches it)
        self.namespace = namespace  # this process's part of a shared server (buckets, repositories)
        self._owned: list = []  # servers this process started (their Popen objects live as long as the run)

    @contextlib.contextmanager
    def _locked(self, name: str):
        with open(self.folder / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    # --- the process record
    def recorder(self, server: str) -> Callable[[int], None]:
        """What a server calls with the pid of each process it spawns (before anything else can fail)."""

        def record(pid: int) -> None:
            line = f"{pid} {start_time(pid) or 0} {server}\n"
            with open(self.folder / "pids", "a") as f:
                f.write(line)

        return record

    def recorded(self, server: str | None = None) -> list[tuple[int, int]]:
        """(pid, start time) of the recorded processes (all, or one server's), newest first."""
        try:
            lines = (self.folder / "pids").read_text().splitlines()
        except FileNotFoundError:
            return []
        rows = [line.split(" ", 2) for line in lines if line.strip()]
        return [(int(pid), int(started)) for pid, started, name in reversed(rows) if server in (None, name)]

    # --- shared servers
    def shared(self, name: str, kind, start: Callable[[Path, Callable[[int], None]], object]):
        """The run's server ``name``: ``start(folder, record)`` (returns a started ``kind``) in the first process
        that asks, ``kind.attach(state, namespace)`` everywhere (the starter too: no process holds a handle that
        could stop a server the others use)."""
        state_file, failed = self.folder / f"{name}.json", self.folder / f"{name}.failed"
        with self._locked(name):
            if failed.exists():
                pytest.fail(
                    f"the shared {name!r} server failed to start in another worker:\n{failed.read_text()}",
                    pytrace=False,
                )
            if not state_file.exists():
                self._ensure_reaper()
                folder = self.folder / name
                shutil.rmtree(folder, ignore_errors=True)  # a start that died with its process (SIGKILL) left it
                folder.mkdir()
                try:
                    server = start(folder, self.recorder(name))
                except BaseException:
                    failed.write_text(traceback.format_exc()[-6000:])
                    stop_processes(self.recorded(name))
                    raise
                self._owned.append(server)
                state_file.write_text(json.dumps(server.state()))
        return kind.attach(json.loads(state_file.read_text()), self.namespace)

    def _ensure_reaper(self) -> None:
        with self._locked("reaper"):
            if (self.folder / "reaper").exists():
                return
            reaper = subprocess.Popen(
                [sys.executable, __file__, "--reap", str(self.folder), self.controller],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            (self.folder / "reaper").write_text(str(reaper.pid))

    def close(self) -> None:
        """Stop every recorded process and remove the folder (the controller, at the end of the run)."""
        stop_processes(self.recorded())
        self._owned.clear()
        shutil.rmtree(self.folder, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------- hooks
RUN = pytest.StashKey[ServerRun]()


def _me() -> str:
    return f"{os.getpid()}:{start_time(os.getpid())}"


def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:  # the controller, or the one process of a run without xdist
        folder = Path(tempfile.mkdtemp(prefix="ct-servers-"))
        config.stash[RUN] = ServerRun(folder, _me(), "main")
    else:
        config.stash[RUN] = ServerRun(
            Path(workerinput[FOLDER_INPUT]), workerinput[CONTROLLER_INPUT], workerinput["workerid"]
        )


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist, in the controller: give each worker the run's server folder and the controller's identity."""
    run = node.config.stash[RUN]
    node.workerinput[FOLDER_INPUT] = str(run.folder)
    node.workerinput[CONTROLLER_INPUT] = run.controller


def pytest_unconfigure(config: pytest.Config) -> None:
    if getattr(config, "workerinput", None) is None and RUN in config.stash:
        config.stash[RUN].close()


def server_run(config: pytest.Config) -> ServerRun:
    return config.stash[RUN]


# ---------------------------------------------------------------------------------------------------- the reaper
def _alive(identity: str) -> bool:
    pid, started = identity.split(":")
    return str(start_time(int(pid))) == started


def reap(folder: Path, controller: str) -> None:
    """Wait while the run lasts (its folder exists, its controller lives); then stop what the run left."""
    while folder.is_dir() and _alive(controller):
        time.sleep(1.0)
    if folder.is_dir():
        ServerRun(folder, controller, "reaper").close()


if __name__ == "__main__":
    if sys.argv[1:2] != ["--reap"] or len(sys.argv) != 4:
        sys.exit("usage: server_run.py --reap FOLDER PID:START")
    reap(Path(sys.argv[2]), sys.argv[3])
