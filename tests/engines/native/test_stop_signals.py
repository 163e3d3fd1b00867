"""SIGTERM and SIGINT to the native engine's ``warm`` and ``check`` while Inductor compiles (issue 34, item 5).

Before, a SIGTERM ended ``warm`` at once with exit 143, no message and no JSON object, and its kernel builds ran
on; SIGINT gave 130 after Inductor's queued builds had finished. Now either signal ends the start within seconds:
exit 130, one ``error:`` line naming the signal, one JSON object (``error: interrupted``), every process it started
(the kernel builds, the tensor-parallel ranks) gone within 10 s. A root the start created is removed, as the vLLM and
torch engines remove theirs (issue 45, item 4: before, the native start kept it); in a root that was there, what it
left unfinished is refused by ``pack`` (exit 2: the native index rule); the message names only the one of the two
that is so, and the exit prints nothing more (no extension's report of objects left alive). Each start's kernel
builds are held (tests/stop_helpers.py), so the signal comes while Inductor compiles, however fast the machine."""

from __future__ import annotations

import signal

import pytest

from tests.cli_calls import cli_env, run_cli
from tests.stop_helpers import DEADLINE, run_out, slow_compiler_env, start, stop, wait_for

pytestmark = pytest.mark.slow

# (command, signal, extra flags, whether the root is there before the start)
CASES = {
    "warm-SIGTERM": ("warm", signal.SIGTERM, (), False),
    "warm-SIGINT-in-a-root-that-was-there": ("warm", signal.SIGINT, (), True),
    "warm-tp2-SIGINT": ("warm", signal.SIGINT, ("-tp", "2"), False),
    "check-SIGTERM": ("check", signal.SIGTERM, (), False),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_a_stop_signal_ends_the_start_its_processes_and_leaves_nothing_it_made(tmp_path, case):
    command, sig, extra, there = CASES[case]
    root = tmp_path / "root"
    if there:
        root.mkdir()
    env, compiling = slow_compiler_env(tmp_path, cli_env())
    proc = start([command, "--model", "tiny", "--device", "cpu", "--cache-root", root, *extra, "--json"], env)
    wait_for(compiling, proc, timeout=300)
    s = stop(proc, sig)

    assert s.rc == 130, (s.rc, s.err[-3000:])
    assert s.exit_seconds < DEADLINE, s.exit_seconds
    doc = s.one_json()
    assert doc["error"] == "interrupted" and doc["exit_code"] == 130 and doc["ok"] is False, doc
    assert doc["command"] == command and f"stopped by {sig.name}" in doc["message"], doc
    assert f"stopped by {sig.name}" in s.error_line()
    # the exit is quiet: no extension reports the objects the stopped start left alive (before, ~31 lines of
    # "nanobind: leaked N instances!", " - leaked instance ...", " - leaked type ..." from Triton's module as the
    # interpreter finalized)
    assert [
        ln for ln in s.err.splitlines() if "nanobind" in ln or "leaked instance" in ln or "leaked type" in ln
    ] == [], s.err[-3000:]
    # the message names only what is left of the root (before, "pack refuses what it left unfinished in ROOT" of a
    # root the start had removed)
    if there:
        assert f"pack refuses what it left unfinished in {root}" in doc["message"], doc
    else:
        assert f"the cache root {root} it created is removed" in doc["message"], doc
        assert "pack" not in doc["message"], doc
    assert any("g++" in p.cmd for p in s.tree), s.tree  # the signal came while a kernel was being built
    if extra:
        assert sum("multiprocessing.spawn" in p.cmd for p in s.tree) >= 2, s.tree  # the ranks ran
    assert s.left == [], s.left
    if not there:
        assert not root.exists(), sorted(str(p) for p in root.rglob("*"))[:10]
        return
    r = run_cli("pack", str(root), "-o", str(tmp_path / "b.ctb"))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "did not complete" in r.stderr and not (tmp_path / "b.ctb").exists(), r.stderr


@pytest.mark.parametrize("command", ["warm", "check"])
def test_a_time_limit_ends_the_start_as_a_stop_signal_does(tmp_path, command):
    """``--timeout``: a start whose kernel builds never finish ends at its limit, exit 7, every process it started
    gone, the root it created removed; the one line says it was the time limit."""
    root = tmp_path / "root"
    env, _ = slow_compiler_env(tmp_path, cli_env())
    proc = start(
        [command, "--model", "tiny", "--device", "cpu", "--cache-root", root, "--timeout", "20", "--json"], env
    )
    s = run_out(proc, timeout=300)
    assert s.rc == 7, (s.rc, s.err[-3000:])
    doc = s.one_json()
    assert doc["exit_code"] == 7 and doc["command"] == command and doc["ok"] is False, doc
    assert f"{command} stopped by --timeout 20 s" in doc["message"] and "--timeout 20 s" in s.error_line(), doc
    assert f"the cache root {root} it created is removed" in doc["message"] and not root.exists(), doc
    assert s.left == [], s.left
