"""The torch engine keeps the contract of the other engines: a server warmed until it is ready and its requests ran,
progress while it runs, one JSON object, the exit-code table, bad input refused in one line with nothing written,
a failing program named by its own last error, and a stop signal or a time limit that ends the program with
cachetool."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.engines.torch.conftest import ENV, PY, cachetool, error_line, free_port, json_out, ok

SERVER_ARGS = ("--request", 'POST /run {"n": 8}')


def _server(progs: dict, port: int) -> tuple[str, ...]:
    return ("--ready-url", f"http://127.0.0.1:{port}/health", *SERVER_ARGS, "--", PY, progs["server"], port)


@pytest.mark.slow
def test_a_server_is_warmed_until_ready_and_its_requests_ran_then_starts_hot(progs, tmp_path):
    root = tmp_path / "root"
    port = free_port()
    r = ok(cachetool("warm", "--engine", "torch", "--cache-root", root, "--", *_server(progs, port)))
    # progress on stderr while it runs, the start's lines on stdout
    assert "warm: running" in r.stderr and "warm: ready after" in r.stderr, r.stderr
    assert "warm: request 1/1 done: POST" in r.stderr and "-> 200" in r.stderr, r.stderr
    assert "result         warmed: compiled 1 graph(s)" in r.stdout, r.stdout

    c = json_out(
        ok(
            cachetool(
                "check",
                "--engine",
                "torch",
                "--cache-root",
                root,
                "--require-hit",
                "--json",
                "--",
                *_server(progs, free_port()),
            )
        )
    )
    assert c["hit"] and c["fx_graph_hits"] == 1 and c["cpp_kernels_built"] == 0, c
    assert set(c["phases"]) == {"ready", "requests", "stop"} and c["startup_seconds"] == c["phases"]["ready"], c
    assert [q["status"] for q in c["requests"]] == [200] and c["program_exit"] is None, c


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((), "--engine torch needs the program's command after --"),
        (("--", "--request", "/run", "--", PY, "x.py"), "--request needs --ready-url"),
        (("--", "--ready-url", "ftp://h/x", PY, "x.py"), "--ready-url 'ftp://h/x' is not an http(s) URL"),
        (("--", "--ready-timeout", "soon", PY, "x.py"), "--ready-timeout 'soon' is not a number of seconds"),
        (("--", "--bogus", "1", PY, "x.py"), "unknown option --bogus before the command after --"),
        (("--model", "tiny", "--", PY, "x.py"), "--model is another engine's option"),
        (("--device", "cuda", "--", PY, "x.py"), "--device is another engine's option"),
        (("-cc.mode=0", "--", PY, "x.py"), "-cc.* is another engine's option"),
    ],
    ids=["no-command", "request-without-server", "bad-url", "bad-timeout", "unknown-option", "model", "device", "cc"],
)
@pytest.mark.parametrize("verb", ["warm", "check"])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(verb, args, needle, tmp_path):
    root = tmp_path / "root"
    r = cachetool(verb, "--engine", "torch", "--cache-root", root, *args)
    assert r.returncode == 2 and needle in error_line(r), r.stderr[-2000:]
    assert not root.exists()


def test_a_failing_program_is_named_by_its_own_last_error_and_its_root_goes(tmp_path):
    root = tmp_path / "root"
    code = "import sys; print('loading'); print('ValueError: no such checkpoint', file=sys.stderr); sys.exit(3)"
    r = cachetool("warm", "--engine", "torch", "--cache-root", root, "--json", "--", PY, "-c", code)
    out = json_out(r)
    assert r.returncode == 1 and out["ok"] is False and out["exit_code"] == 1, out
    assert "exited with code 3: ValueError: no such checkpoint" in out["message"], out
    assert not root.exists()


def test_a_program_that_compiles_nothing_is_not_a_warm(tmp_path):
    root = tmp_path / "root"
    r = cachetool("warm", "--engine", "torch", "--cache-root", root, "--", PY, "-c", "import torch; print(1)")
    assert r.returncode == 1 and "compiled nothing with torch.compile" in error_line(r), r.stderr[-2000:]
    assert not root.exists()


def test_a_command_that_cannot_run_is_one_line(tmp_path):
    r = cachetool("warm", "--engine", "torch", "--cache-root", tmp_path / "root", "--", tmp_path / "no-such-program")
    assert r.returncode == 1 and "cannot run" in error_line(r) and not (tmp_path / "root").exists()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float = 120) -> int:
    deadline = time.monotonic() + seconds
    while not path.exists() or not path.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    return int(path.read_text())


def test_a_server_that_never_answers_is_a_time_limit_and_is_stopped(progs, tmp_path):
    pidfile = tmp_path / "pid"
    r = cachetool(
        "warm",
        "--engine",
        "torch",
        "--cache-root",
        tmp_path / "root",
        "--",
        "--ready-url",
        f"http://127.0.0.1:{free_port()}/health",
        "--ready-timeout",
        "3",
        "--",
        PY,
        progs["sleeper"],
        pidfile,
    )
    assert r.returncode == 7 and "did not answer within 3 s" in error_line(r), r.stderr[-2000:]
    assert _gone(int(pidfile.read_text())) and not (tmp_path / "root").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_stops_the_program_and_exits_130(sig, progs, tmp_path):
    """Ctrl-C, or Kubernetes stopping the pod: the program's process group goes with cachetool, and the root the
    warm made goes too (cachetool runs in a session of its own, as in a terminal: SIGINT reaches it)."""
    pidfile, root = tmp_path / "pid", tmp_path / "root"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cachetool",
            "warm",
            "--engine",
            "torch",
            "--cache-root",
            str(root),
            "--",
            PY,
            str(progs["sleeper"]),
            str(pidfile),
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    program = _wait_for(pidfile, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "error: " in err, err[-2000:]
    assert _gone(program) and not root.exists()
