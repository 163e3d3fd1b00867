"""One set of servers per test run (tests/server_run.py), seen from outside: a small pytest run of its own that
uses the real docker-registry, with two xdist workers or none. Both workers attach to one server, each names its
repositories in its own namespace, and no server process outlives the run: not after a normal end, not after a
Ctrl-C, not after the run's controller is killed (the reaper stops them)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.server_run import start_time
from tests.servers import REGISTRY_BINARY, require_binaries

pytestmark = pytest.mark.servers

REPO = Path(__file__).resolve().parents[2]
INNER_TEST = """
import json, os, pathlib, time

def test_uses_the_registry(oci_registry):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    run = oci_registry.dir.parent
    pids = [int(line.split()[0]) for line in (run / "pids").read_text().splitlines()]
    seen = {"worker": worker, "host": oci_registry.host, "repo": oci_registry.repo_url("same"), "run": str(run),
            "pids": pids}
    (pathlib.Path(os.environ["SEEN"]) / f"{worker}-{__name__}.json").write_text(json.dumps(seen))
    if os.environ.get("HOLD"):
        time.sleep(300)
"""


@pytest.fixture
def inner(tmp_path):
    """A test folder of two files that use ``oci_registry`` (each records what it saw in ``seen/``)."""
    require_binaries("the server-run tests (docker-registry)", [REGISTRY_BINARY])
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.server_run", "tests.servers"]\n')
    for name in ("test_one.py", "test_two.py"):
        (tmp_path / name).write_text(INNER_TEST)
    (tmp_path / "seen").mkdir()
    return tmp_path


# pytest with Ctrl-C heard: a run started in the background of a script (as CI may start this suite) inherits
# SIGINT ignored, and so would the inner run and its workers
AS_A_TERMINAL_STARTS_IT = (
    "import signal, sys, pytest\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "sys.exit(pytest.main(sys.argv[1:]))\n"
)


@pytest.fixture
def start_pytest(inner, request):
    """Start ``pytest ARGS`` on the inner folder in a process group of its own (killed at the end if it is still
    running: a failed test leaves no run behind)."""

    def start(*args: str, hold: bool = False) -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": str(REPO), "SEEN": str(inner / "seen"), "HOLD": "1" if hold else ""}
        env.pop("PYTEST_XDIST_WORKER", None)
        proc = subprocess.Popen(
            [sys.executable, "-c", AS_A_TERMINAL_STARTS_IT, "-q", "-p", "no:cacheprovider", *args],
            cwd=inner,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        request.addfinalizer(lambda: proc.poll() is None and os.killpg(proc.pid, signal.SIGKILL))
        return proc

    return start


def seen(folder: Path, count: int, proc: subprocess.Popen, timeout: float = 120) -> list[dict]:
    """What the inner tests recorded, once ``count`` of them have."""
    deadline = time.monotonic() + timeout
    while len(files := sorted((folder / "seen").glob("*.json"))) < count:
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "the inner tests did not start"
        time.sleep(0.2)
    return [json.loads(f.read_text()) for f in files]


def assert_nothing_left(records: list[dict], timeout: float = 0) -> None:
    """Every server process the run recorded is gone (after ``timeout`` seconds at most), and its folder."""
    pids, folder = {pid for r in records for pid in r["pids"]}, Path(records[0]["run"])
    assert pids

    def leftovers() -> list:
        return [pid for pid in pids if start_time(pid) is not None] + ([str(folder)] if folder.exists() else [])

    deadline = time.monotonic() + timeout
    while (left := leftovers()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == [], f"left behind by the run: {left}"


def test_two_workers_share_one_server_each_in_its_namespace_and_none_outlives_the_run(inner, start_pytest):
    proc = start_pytest("-n", "2", "--dist", "loadfile")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    records = seen(inner, 2, proc)
    assert len({r["host"] for r in records}) == 1 and len({r["run"] for r in records}) == 1
    assert len({r["pids"][0] for r in records}) == 1  # one registry process, started once
    for r in records:
        assert r["repo"] == f"oci://{r['host']}/{r['worker']}/same"
    assert_nothing_left(records)


def test_a_run_interrupted_by_ctrl_c_leaves_no_server(inner, start_pytest):
    proc = start_pytest("-n", "2", "--dist", "loadfile", hold=True)
    records = seen(inner, 2, proc)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends: the whole foreground group
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, out
    assert_nothing_left(records)


def test_a_run_whose_controller_is_killed_leaves_no_server(inner, start_pytest):
    proc = start_pytest("-n", "0", hold=True)
    records = seen(inner, 1, proc)
    assert records[0]["worker"] == "main" and records[0]["repo"].endswith("/main/same")
    os.killpg(proc.pid, signal.SIGKILL)  # no hook runs: the reaper (a session of its own) stops the server
    proc.wait(timeout=30)
    assert_nothing_left(records, timeout=30)
