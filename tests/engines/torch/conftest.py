"""The torch engine end to end on real torch.compile programs (tests/engines/torch/programs.py), each ``cachetool``
call its own process as CI and an init-container run it. Each program is warmed and pushed once for the module that
needs it (a module fixture), and its tests share that root and bundle. The signing keys of the in-process tests and
the trust isolation are tests/engines/conftest.py's."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engines.torch import programs

PY = sys.executable
# Inductor's CPU ISA probe costs ~9 s per process here; it changes no generated code (and no recorded fact)
ENV = {**os.environ, "CACHETOOL_LOGGING_LEVEL": "WARNING", "TORCHINDUCTOR_VEC_ISA_OK": "1"}


def cachetool(*args, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PY, "-m", "cachetool", *map(str, args)],
        capture_output=True,
        text=True,
        env={**ENV, **(env or {})},
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def ok(r: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-4000:]}"
    return r


def json_out(r: subprocess.CompletedProcess) -> dict:
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1, r.stdout  # one JSON object, one line
    return json.loads(lines[0])


def error_line(r: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    return lines[0]


def printed(result: dict, prefix: str) -> list[str]:
    """The lines the program printed that start with ``prefix`` (its log, named by the result)."""
    return [ln for ln in Path(result["log"]).read_text().splitlines() if ln.startswith(prefix)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def progs(tmp_path_factory) -> dict[str, Path]:
    return programs.write(tmp_path_factory.mktemp("programs"))


@pytest.fixture(scope="module")
def signing_key(tmp_path_factory) -> Path:
    key = tmp_path_factory.mktemp("keys") / "signing.key"
    ok(cachetool("keygen", "-o", key))
    return key


def warm_and_push(tmp_path_factory, name: str, signing_key: Path, *command) -> dict:
    """``cachetool warm --engine torch --push file://...`` of one program: the CI job."""
    base = tmp_path_factory.mktemp(f"{name}-warm")
    ref = f"file://{base / 'store'}/{name}:ci"
    r = ok(
        cachetool(
            "warm",
            "--engine",
            "torch",
            "--cache-root",
            base / "ci-root",
            "--push",
            ref,
            "--sign-key",
            signing_key,
            "--json",
            "--",
            *command,
        )
    )
    return {
        "base": base,
        "root": base / "ci-root",
        "ref": ref,
        "summary": json_out(r),
        "stderr": r.stderr,
        "pub": Path(f"{signing_key}.pub"),
    }
