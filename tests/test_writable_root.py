"""``warm`` into a cache root it cannot write (issue 28, item 10). Before: it compiled for ~28 s, then ``error:
unexpected BackendCompilerFailed: backend='<… PiecewiseBackend object at 0x…>' raised:``, exit 1. Now the root is
checked with a probe file before anything is built or compiled: one line naming the root, exit 2.

Tests run as root, where a chmod does not stop a write: the read-only root is a read-only bind mount in a private
mount namespace (``unshare -m``, as tests/deploy/test_readonly_root.py does), and the other case is a root under a
file (ENOTDIR)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli_calls import REPO, cli_env

# In the namespace: $RO a read-only bind mount of itself; then the command.
READ_ONLY_BIND = 'set -e\nmount --bind "$RO" "$RO"\nmount -o remount,bind,ro "$RO"\nexec "$@"\n'


def _warm(root: Path, *extra: str, namespace: bool = False) -> tuple[subprocess.CompletedProcess, float]:
    argv = [
        sys.executable,
        "-m",
        "cachetool",
        "warm",
        "--model",
        "tiny",
        "--device",
        "cpu",
        "--cache-root",
        str(root),
        *extra,
    ]
    env = cli_env(RO=str(root.parent))
    if namespace:
        argv = ["unshare", "-m", "--propagation", "private", "bash", "-c", READ_ONLY_BIND, "bash", *argv]
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=str(REPO), timeout=300)
    return proc, time.monotonic() - t0


def _one_line(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def read_only_ok(tmp_path_factory) -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare for a read-only bind mount")
    probe = tmp_path_factory.mktemp("probe")
    r = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", "-c", READ_ONLY_BIND, "bash", "touch", str(probe / "x")],
        capture_output=True,
        text=True,
        env={**os.environ, "RO": str(probe)},
    )
    if "Read-only file system" not in r.stderr:
        pytest.skip(f"no read-only bind mount here: {r.stderr.strip()[-200:]}")
    return True


def test_warm_into_a_read_only_root_fails_at_once_naming_it(read_only_ok, tmp_path):
    root = tmp_path / "ro" / "root"
    root.mkdir(parents=True)
    proc, seconds = _warm(root, "--json", namespace=True)
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = _one_line(proc)
    assert str(root) in line and "not writable" in line and "Read-only file system" in line, line
    assert json.loads(proc.stdout)["exit_code"] == 2
    assert "compiling" not in proc.stderr and seconds < 25, (seconds, proc.stderr[-2000:])  # nothing was built
    assert list(root.iterdir()) == []


def test_warm_into_a_root_under_a_file_fails_at_once_naming_it(tmp_path):
    (tmp_path / "file").write_text("x")
    root = tmp_path / "file" / "root"
    proc, seconds = _warm(root)
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = _one_line(proc)
    assert str(root) in line and "is a file" in line, line
    assert "compiling" not in proc.stderr and seconds < 25, (seconds, proc.stderr[-2000:])
