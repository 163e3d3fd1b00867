"""Tensor-parallel tests on the CPU (gloo, TP=2, tiny model). One cold ``warm --tensor-parallel-size 2`` is
shared by the session; the whole folder stays under ~3 minutes on a 2-core box."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cli_calls import cli_env, run_cli

os.environ["TORCHINDUCTOR_VEC_ISA_OK"] = "1"


def last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def tp_warm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """``cachetool warm --model tiny --tensor-parallel-size 2`` in a fresh root (2 gloo ranks). Returns
    (root, the --json object)."""
    root = tmp_path_factory.mktemp("tp_root")
    proc = run_cli(
        "warm",
        "--model",
        "tiny",
        "--cache-root",
        str(root),
        "--tensor-parallel-size",
        "2",
        "--json",
        env=cli_env(),
        timeout=900,
    )  # ~2 min on an idle 2-core box; 400 s ran out under load
    assert proc.returncode == 0, proc.stderr[-4000:]
    return root, last_json(proc.stdout)
