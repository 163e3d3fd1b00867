"""The stop signals' shared parts (issue 34, item 5), with plain processes (``sh``, ``sleep``): fast.

- :func:`cachetool.stop_signals.stopped_by_signals` turns SIGTERM or SIGINT into the block's one
  :class:`StopSignalError` (exit 130) after ending every process the block started, children of children
  included, also one that defers SIGTERM (as vLLM's EngineCore does while it compiles: SIGKILL after the grace)
  and one a thread starts just after the signal (as Inductor's compile pool does with the job it had taken);
  a second signal during that cleanup does not cut it; the handlers are restored.
- :func:`cachetool.process_tree.end_group` ends a whole process group, an orphaned member included;
  :func:`cachetool.process_tree.end` never signals a pid the kernel reused, and leaves alone a process that
  ignores SIGTERM (multiprocessing's resource tracker, which ends with its parent).

The real starts are tests/engines/native/test_stop_signals.py (native) and
tests/engines/vllm/real/test_stop_signals.py (vLLM)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from cachetool import process_tree
from tests.stop_helpers import REPO, processes

# A block under the stop signals that starts a shell with two sleeping children and a shell that defers SIGTERM
# (its trap runs and it goes on), reports their pids, then sleeps; the StopSignalError it ends in is printed.
BLOCK = """
import json, signal, subprocess, sys, threading, time
from cachetool import bounds, process_tree
from cachetool.errors import StopSignalError, WaitTimeoutError
from cachetool.stop_signals import stopped_by_signals

process_tree.GRACE = 1.0
TIMEOUT = float(sys.argv[1]) if len(sys.argv) > 1 else None
late = []


def one_more_job(stop):  # a worker thread that starts the job it had taken as the stop comes (Inductor's pool)
    stop.requested.wait()
    time.sleep(0.05)
    late.append(subprocess.Popen(["sleep", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))


# as the block finds them (SIGINT stays ignored in a process started in a script's background)
before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM)}
try:
    with stopped_by_signals(lambda name: f"block stopped by {name}", TIMEOUT) as stop, bounds.phase("sleeping"):
        threading.Thread(target=one_more_job, args=(stop,), daemon=True).start()
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & wait"], **quiet)
        subprocess.Popen(["sh", "-c", "trap 'echo deferred' TERM; while :; do sleep 0.2; done"], **quiet)
        time.sleep(1.0)
        print(json.dumps({"ready": True}), flush=True)
        time.sleep(60)
except (StopSignalError, WaitTimeoutError) as exc:
    time.sleep(0.1)
    print(json.dumps({"error": str(exc), "exit_code": exc.exit_code, "late": [p.pid for p in late],
                      "handlers": [signal.getsignal(s) is h for s, h in before.items()],
                      "timer": signal.getitimer(signal.ITIMER_REAL)[0]}),
          flush=True)
"""


def _descendants(pid: int) -> set[int]:
    procs, found, todo = processes(), set(), [pid]
    while todo:
        parent = todo.pop()
        kids = [p.pid for p in procs.values() if p.ppid == parent]
        found.update(kids)
        todo += kids
    return found


def _running(pids: set[int]) -> set[int]:
    procs = processes()
    return {p for p in pids if p in procs and procs[p].state != "Z"}


def _start_block(*args: str) -> tuple[subprocess.Popen, set[int]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", BLOCK, *args],
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(REPO),
        env={**os.environ, "PYTHONPATH": str(REPO)},
        start_new_session=True,
    )
    assert json.loads(proc.stdout.readline()) == {"ready": True}
    started = _descendants(proc.pid)
    assert len(started) >= 4, started  # two shells, two sleeps (and the deferring shell's, now and then)
    return proc, started


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_ends_the_blocks_processes_then_raises_one_error(sig):
    proc, started = _start_block()
    t0 = time.monotonic()
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=30)
    seconds = time.monotonic() - t0
    doc = json.loads(out)
    assert doc["error"] == f"block stopped by {sig.name}" and doc["exit_code"] == 130, doc
    assert doc["handlers"] == [True, True, True], doc  # the block's handlers are gone
    assert _running(started) == set(), started
    assert len(doc["late"]) == 1 and _running(set(doc["late"])) == set(), doc  # started after the signal: ended too
    # the deferring shell was killed after the grace (1 s here), not waited for
    assert 1.0 <= seconds < 1.0 + process_tree.KILL_WAIT + 3.0, seconds


def test_a_time_limit_ends_the_block_as_a_stop_signal_does_then_raises_the_timeout():
    proc, started = _start_block("3")  # warm --timeout 3, check --timeout 3
    out, _ = proc.communicate(timeout=30)
    doc = json.loads(out)
    assert doc["error"] == "block stopped by --timeout 3 s during sleeping" and doc["exit_code"] == 7, doc
    assert doc["handlers"] == [True, True, True] and doc["timer"] == 0.0, doc  # SIGALRM's handler and timer gone
    assert _running(started) == set(), started
    assert len(doc["late"]) == 1 and _running(set(doc["late"])) == set(), doc


def test_a_block_that_ends_in_time_leaves_no_timer_behind():
    code = (
        "import signal, time\nfrom cachetool.stop_signals import stopped_by_signals\n"
        "with stopped_by_signals(lambda n: n, 0.5):\n    pass\n"
        "time.sleep(1.0)\nprint(signal.getitimer(signal.ITIMER_REAL)[0], signal.getsignal(signal.SIGALRM))"
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=str(REPO),
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert p.returncode == 0 and p.stdout.split() == ["0.0", str(int(signal.SIG_DFL))], (p.stdout, p.stderr)


def test_a_second_signal_does_not_cut_the_cleanup():
    proc, started = _start_block()
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)  # the cleanup waits for the deferring shell
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert json.loads(out)["error"] == "block stopped by SIGTERM", out
    assert _running(started) == set(), started


def test_end_group_ends_a_whole_group_an_orphan_and_a_deferrer_included():
    # the leader starts an orphan (its parent shell exits at once) and a shell that defers SIGTERM
    script = "(sleep 60 &) ; sh -c \"trap 'echo deferred' TERM; while :; do sleep 0.2; done\" & wait"
    leader = subprocess.Popen(["sh", "-c", script], start_new_session=True, stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    members = {p.pid for p in processes().values() if p.sid == leader.pid and p.state != "Z"}
    assert any(processes()[m].ppid != leader.pid for m in members if m in processes()), members  # an orphan
    t0 = time.monotonic()
    assert process_tree.end_group(leader.pid, grace=0.5) is True
    assert time.monotonic() - t0 >= 0.5  # the deferrer needed SIGKILL
    leader.wait(5)
    assert _running(members) == set(), members


def test_end_signals_no_reused_pid_and_leaves_a_process_that_ignores_sigterm():
    sleeper = subprocess.Popen(["sleep", "60"])
    ignorer = subprocess.Popen(["sh", "-c", "trap '' TERM; exec sleep 60"])
    time.sleep(0.3)
    try:
        table = process_tree.table()
        reused = (sleeper.pid, table[sleeper.pid].start + 1)  # the same pid, started at another time
        assert process_tree.end({reused}, grace=0.2) == set()
        assert sleeper.poll() is None  # not signalled
        assert process_tree.end({table[ignorer.pid].identity}, grace=0.2) == set()
        assert ignorer.poll() is None  # left to end with its parent
        assert process_tree.end({table[sleeper.pid].identity}, grace=2.0) == set()
        assert sleeper.wait(5) == -signal.SIGTERM
    finally:
        for p in (sleeper, ignorer):
            p.kill()
            p.wait()


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=str(REPO),
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


PRELUDE = """
import json, signal, threading, time
from cachetool import bounds
from cachetool.errors import UsageError, WaitTimeoutError
from cachetool.stop_signals import stopped_by_signals
"""


def test_a_time_limit_does_not_cut_the_cleanup_of_a_block_that_checks_its_bound():
    """The block's bound has no deadline of its own: only the clock's signal stops it, and the cleanup it starts
    runs whole (before, a bound check raised the timeout first and the signal then cut the cleanup)."""
    code = (
        PRELUDE
        + """
done = []
for _ in range(10):
    try:
        with stopped_by_signals(lambda cause: cause, 0.05):
            try:
                while True:
                    bounds.check("the block")
            finally:
                time.sleep(0.01)  # the cleanup (ending a child, removing a folder)
                done.append(1)
    except WaitTimeoutError as exc:
        assert str(exc) == "--timeout 0.05 s", exc
print(len(done))
"""
    )
    p = _run(code)
    assert p.returncode == 0 and p.stdout.split() == ["10"], (p.stdout, p.stderr[-2000:])


def test_a_bad_time_limit_is_refused_before_any_handler_is_set():
    code = (
        PRELUDE
        + """
before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM)}
try:
    with stopped_by_signals(lambda cause: cause, -1):
        pass
except UsageError as exc:
    print(json.dumps({"error": str(exc), "same": [signal.getsignal(s) is h for s, h in before.items()]}))
"""
    )
    doc = json.loads(_run(code).stdout)
    assert doc == {"error": "--timeout -1: give a number of seconds above 0", "same": [True, True, True]}, doc


def test_an_outer_timer_runs_on_after_a_block_with_its_own_limit():
    """A caller's own timer (or an outer block's limit) is given back, less the block's time."""
    code = (
        PRELUDE
        + """
fired = []
signal.signal(signal.SIGALRM, lambda *a: fired.append(time.monotonic()))
t0 = time.monotonic()
signal.setitimer(signal.ITIMER_REAL, 0.6)
with stopped_by_signals(lambda cause: cause, 5):
    time.sleep(0.2)
time.sleep(1.0)
print(json.dumps({"fired": [round(t - t0, 1) for t in fired]}))
"""
    )
    p = _run(code)
    assert json.loads(p.stdout) == {"fired": [0.6]}, (p.stdout, p.stderr[-2000:])


def test_a_time_limit_off_the_main_thread_is_refused():
    code = (
        PRELUDE
        + """
out = []
def start():
    try:
        with stopped_by_signals(lambda cause: cause, 5):
            pass
    except UsageError as exc:
        out.append(str(exc))
threading.Thread(target=start).start()
time.sleep(0.5)
print(json.dumps(out))
"""
    )
    [line] = json.loads(_run(code).stdout)
    assert line.startswith("a time limit (timeout) is kept by a signal, which only the main thread receives"), line
