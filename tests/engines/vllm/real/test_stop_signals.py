"""SIGTERM and SIGINT to ``warm --engine vllm`` and ``check --engine vllm`` with real vLLM (issue 34, item 5).

Before, a SIGTERM ended cachetool silently and left vLLM's EngineCore and worker running under init, compiling
kernels into the root minutes later; the half-written key folder then packed like a complete one. Now the child
runs in a process group of its own that cachetool ends whole (SIGTERM, then SIGKILL: the EngineCore defers
SIGTERM while it compiles): exit 130, one ``error:`` line, one JSON object, no process of the start left 10 s after
the signal, and the key folder the start did not finish marked (``.cachetool-incomplete/``), which ``pack``
refuses naming the mark (exit 2). Two vLLM starts, each stopped early: the warm while its EngineCore builds its
first kernel (held, tests/stop_helpers.py), the check once its EngineCore runs, on a copy of the session's root.
The marks' rules (a later warm that completes settles them) are tests/engines/vllm/test_unfinished_marks.py's."""

from __future__ import annotations

import json
import shutil
import signal

import pytest

from cachetool.engines.root_names import INCOMPLETE_DIR
from tests.cache_trees import aged
from tests.engines.vllm.real.conftest import ENV, FLAGS, cachetool
from tests.stop_helpers import DEADLINE, run_out, slow_compiler_env, start, stop, wait_for

pytestmark = [pytest.mark.slow]


def _check_stopped(s, command: str, sig: signal.Signals) -> None:
    assert s.rc == 130, (s.rc, s.err[-3000:])
    assert s.exit_seconds < DEADLINE, s.exit_seconds
    doc = s.one_json()
    assert doc["error"] == "interrupted" and doc["exit_code"] == 130 and doc["command"] == command, doc
    assert f"stopped by {sig.name}" in doc["message"] and f"stopped by {sig.name}" in s.error_line(), doc
    assert any("EngineCore" in p.cmd for p in s.tree), s.tree  # vLLM's engine ran when the signal came
    assert s.left == [], s.left


def test_sigterm_to_a_vllm_warm_ends_vllm_and_leaves_its_key_folder_refused(tmp_path, tiny_model):
    root = tmp_path / "root"
    root.mkdir()  # the volume a CI job warms into exists (a root the start made would be removed whole)
    env, compiling = slow_compiler_env(tmp_path, ENV)
    proc = start(["warm", "--engine", "vllm", "--model", tiny_model, "--cache-root", root, "--json", "--", *FLAGS], env)
    wait_for(compiling, proc, timeout=600)
    s = stop(proc, signal.SIGTERM)
    _check_stopped(s, "warm", signal.SIGTERM)
    assert any("g++" in p.cmd for p in s.tree), s.tree

    [mark] = (root / INCOMPLETE_DIR).glob("*.json")
    folders = json.loads(mark.read_text())["folders"]
    assert len(folders) == 1 and folders[0].startswith("torch_compile_cache/torch_aot_compile/"), folders
    r = cachetool("pack", root, "-o", tmp_path / "b.ctb")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "did not complete" in r.stderr and mark.name in r.stderr and folders[0] in r.stderr, r.stderr
    assert not (tmp_path / "b.ctb").exists()


@pytest.mark.usefixtures("reading_the_warm_model")
def test_sigint_to_a_vllm_check_ends_vllm_and_leaves_the_root_as_it_was(tmp_path, warmed):
    root = aged(shutil.copytree(warmed["root"], tmp_path / "root", symlinks=True), 60)  # the others' root stays
    proc = start(
        ["check", "--engine", "vllm", "--model", warmed["model"], "--cache-root", root, "--json", "--", *FLAGS], ENV
    )
    wait_for("EngineCore", proc, timeout=600)
    s = stop(proc, signal.SIGINT)
    _check_stopped(s, "check", signal.SIGINT)
    # stopped before vLLM wrote into a key folder: nothing is marked, and the root packs as before
    assert not (root / INCOMPLETE_DIR).exists()
    r = cachetool("pack", root, "-o", tmp_path / "b.ctb")
    assert r.returncode == 0, (r.returncode, r.stderr)


@pytest.mark.usefixtures("reading_the_warm_model")
def test_a_killed_check_leaves_no_vllm_process_behind(tmp_path, warmed):
    """SIGKILL gives cachetool no chance to end its child's group: the child's parent-death signal does it (the
    child ends its own process group: vLLM's EngineCore survived its killed parent before)."""
    root = aged(shutil.copytree(warmed["root"], tmp_path / "root", symlinks=True), 60)  # the others' root stays
    proc = start(
        ["check", "--engine", "vllm", "--model", warmed["model"], "--cache-root", root, "--json", "--", *FLAGS], ENV
    )
    wait_for("EngineCore", proc, timeout=600)
    s = stop(proc, signal.SIGKILL)
    assert s.rc == -signal.SIGKILL and any("EngineCore" in p.cmd for p in s.tree), (s.rc, s.tree)
    assert s.left == [], s.left


def test_a_vllm_warm_past_its_time_limit_ends_vllm_and_names_the_phase(tmp_path, tiny_model):
    """``warm --timeout``: vLLM's start (its kernel builds held, so it cannot finish) ends at the limit as on
    SIGTERM: exit 7, one line naming the limit and the phase vLLM's log was in, no process of the start left."""
    root = tmp_path / "root"
    env, _ = slow_compiler_env(tmp_path, ENV)
    proc = start(
        [
            "warm",
            "--engine",
            "vllm",
            "--model",
            tiny_model,
            "--cache-root",
            root,
            "--timeout",
            "90",
            "--json",
            "--",
            *FLAGS,
        ],
        env,
    )
    s = run_out(proc, timeout=600)
    assert s.rc == 7, (s.rc, s.err[-3000:])
    doc = s.one_json()
    assert doc["exit_code"] == 7 and doc["command"] == "warm", doc
    assert "warm stopped by --timeout 90 s during vLLM's start (" in doc["message"], doc
    assert "--timeout 90 s during vLLM's start (" in s.error_line()
    assert s.left == [], s.left
    assert not root.exists()  # the root this start made is removed
