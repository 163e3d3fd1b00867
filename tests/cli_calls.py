"""``cachetool`` as a CI job or a person runs it: a process of its own (:func:`run_cli`, :func:`run_json`, in the
environment of :func:`cli_env`), and the one ``error:`` line a failure prints (:func:`one_error_line`).

:func:`cli_env` sets TORCHINDUCTOR_VEC_ISA_OK=1: it skips Inductor's ~9.5 s per-process build check of each vector
ISA on this box (the detected ISA is trusted). It is excluded from the cache key (it changes no generated code), so
caches warmed with or without it are interchangeable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def cli_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["TORCHINDUCTOR_VEC_ISA_OK"] = "1"
    env.pop("CACHETOOL_DISABLE_COMPILE_CACHE", None)
    env.pop("CACHETOOL_COMPILE_CACHE_SAVE_FORMAT", None)
    env.update(extra)
    return env


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cachetool", *args],
        capture_output=True,
        text=True,
        env=env or cli_env(),
        timeout=timeout,
        cwd=str(REPO),
    )


def run_json(*args: str, env: dict[str, str] | None = None) -> dict:
    proc = run_cli(*args, "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1, err
    return lines[0]
