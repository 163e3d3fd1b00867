"""Shared helpers for the compiler tests (CPU, tiny model).

TORCHINDUCTOR_VEC_ISA_OK=1 is set for this process and every subprocess: it skips Inductor's ~9.5 s per-process
build check of each vector ISA on this box (the detected ISA is trusted). It is excluded from the cache key
(it changes no generated code), so caches warmed with or without it are interchangeable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ["TORCHINDUCTOR_VEC_ISA_OK"] = "1"
REPO = Path(__file__).resolve().parents[2]


def cli_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["TORCHINDUCTOR_VEC_ISA_OK"] = "1"
    env.pop("CACHETOOL_DISABLE_COMPILE_CACHE", None)
    env.pop("CACHETOOL_COMPILE_CACHE_SAVE_FORMAT", None)
    env.update(extra)
    return env


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cachetool", *args], capture_output=True, text=True,
                          env=env or cli_env(), timeout=timeout, cwd=str(REPO))


def run_json(*args: str, env: dict[str, str] | None = None) -> dict:
    proc = run_cli(*args, "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def warmed_root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, str]:
    """One cold ``cachetool warm`` of the tiny model in a fresh root (a separate process, DEBUG logs); shared.
    Returns (root, the --json object, stderr)."""
    root = tmp_path_factory.mktemp("warm_root")
    proc = run_cli("warm", "--model", "tiny", "--cache-root", str(root), "--json",
                   env=cli_env(CACHETOOL_LOGGING_LEVEL="DEBUG"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr
