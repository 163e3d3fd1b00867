"""Shared test setup. The real S3 (Ceph RGW) and OCI (docker-registry) servers live in tests/servers.py as
session-scoped fixtures: started on 127.0.0.1 on first use, one of each for the whole run (all xdist workers),
stopped by pid when the run ends (tests/server_run.py).

Expensive things that several files use read-only (a cold compile of the tiny model) are built once per test run
for all xdist workers (:func:`shared_build`), not once per worker or per file."""

pytest_plugins = ["tests.server_run", "tests.servers"]


import fcntl
import json
import os
import shutil
import traceback
from pathlib import Path

import pytest


def shared_build(tmp_path_factory: pytest.TempPathFactory, name: str, build) -> Path:
    """``build(folder)`` once per test run, for every xdist worker: the first worker that asks builds it under a
    file lock, the others wait for it and get the same folder (under the run's base temp folder, so a new run
    builds again). A build that failed is not retried by the next caller; its error is reported there too.
    The folder is shared: a test that changes anything in it (a start that loads from it writes into its Inductor
    cache) must copy it first."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # pytest-of-USER/pytest-N/: the workers' basetemps are its popen-gwK/ folders
    shared = base / "shared"
    shared.mkdir(exist_ok=True)
    folder, done, failed = shared / name, shared / f"{name}.done", shared / f"{name}.failed"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if failed.exists():
            pytest.fail(f"the shared {name!r} build failed in another worker:\n{failed.read_text()}", pytrace=False)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                build(folder)
            except BaseException:
                failed.write_text(traceback.format_exc()[-6000:])
                raise
            done.touch()
    return folder


@pytest.fixture(scope="session")
def tiny_warm(tmp_path_factory) -> dict:
    """One cold ``cachetool warm --model tiny --device cpu --push file://... --sign-key K --json`` (its own
    process, a fresh root, DEBUG logs) for the whole run: the CI job that the compiler, store and deploy tests
    read. Returns {"dir", "root", "summary" (the --json object; "compile" is what a warm without --push prints),
    "stderr", "ref", "store", "key", "pub"}. Shared by every worker: copy "root" before starting on it."""

    def build(d: Path) -> None:
        from cachetool.bundle.signing import generate_keypair
        from tests.compiler.conftest import cli_env, run_cli

        generate_keypair(d / "signing.key")
        proc = run_cli("warm", "--model", "tiny", "--device", "cpu", "--cache-root", str(d / "root"),
                       "--push", f"file://{d}/store/tiny:ci", "--sign-key", str(d / "signing.key"), "--json",
                       env=cli_env(CACHETOOL_LOGGING_LEVEL="DEBUG"), timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        (d / "summary.json").write_text(proc.stdout.strip().splitlines()[-1])
        (d / "stderr.txt").write_text(proc.stderr)

    d = shared_build(tmp_path_factory, "tiny_warm", build)
    return {"dir": d, "root": d / "root", "summary": json.loads((d / "summary.json").read_text()),
            "stderr": (d / "stderr.txt").read_text(), "ref": f"file://{d}/store/tiny:ci", "store": d / "store",
            "key": d / "signing.key", "pub": d / "signing.key.pub"}


# --------------------------------------------------------------------------------------------- scheduling
# The files that take longest, longest first: xdist (--dist loadfile) hands a worker the next file in collection
# order when it is nearly done, so a long file that starts late keeps one worker busy while the other idles (the
# two-test real-vLLM TP file ran last, alone, for minutes). Seconds of one worker in a full `-n 2` run on the 2-core
# box (2026-12-03, scripts/test.sh with its C++ builds through ccache; junit times, module and session fixtures
# included; that run shared the box with other runs, 1052 s in all, so the figures are ~1.5x CI's: the order is
# what counts); files not listed keep their order after these. A new file that takes minutes belongs here.
LONGEST_FIRST = {
    "tests/vllm/test_vllm_tp.py": 297,  # the real-vLLM files: one unit (TOGETHER), started first
    "tests/vllm/test_real_server.py": 286,  # builds the session's vLLM warm (94 s of it)
    "tests/vllm/test_vllm_engine.py": 99,  # 166 with the tp=1 check that test_real_server's server start replaced
    "tests/compiler/test_aot_hot_start.py": 219,  # builds the shared tiny_warm when it is the first to ask
    "tests/tp/test_tp_pipeline.py": 127,
    "tests/compiler/test_pipeline.py": 107,
    "tests/compiler/test_artifact_manager.py": 105,
    "tests/stores/test_oci_mirror.py": 82,
    "tests/compiler/test_cache_key.py": 70,
    "tests/e2e/test_deploy_path.py": 68,
    "tests/stores/test_layout_compat.py": 63,
    "tests/compiler/test_timing_names.py": 54,
    "tests/deploy/test_readme.py": 50,
    "tests/tp/test_collectives.py": 41,
    "tests/stores/test_oci_concurrency.py": 32,
    "tests/stores/test_push_pull.py": 31,
    "tests/stores/test_failures.py": 27,
    "tests/stores/test_store_interface.py": 27,
    "tests/stores/test_oci_packs.py": 17,
}


# Files that run as one unit of work, on one worker, one after the other (a path prefix each): two real-vLLM
# starts at once on 2 cores (each binds its OpenMP threads to the cores; -tp 2 is two engine processes) slowed
# each other and everything else far more than their CPU seconds explain.
TOGETHER = ("tests/vllm/",)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's --dist loadfile, with the files under a :data:`TOGETHER` prefix as one unit."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid.split("::", 1)[0])

    return Scheduling(config, log)


def pytest_configure(config):
    # xdist would sort the files by their number of tests (a 2-test file that runs 5 minutes goes last); keep
    # the order below instead (the same as passing --no-loadscope-reorder)
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def _unit(path: str) -> str:
    """The unit of work a test file belongs to: its :data:`TOGETHER` prefix, or the file itself."""
    return next((prefix for prefix in TOGETHER if path.startswith(prefix)), path)


def pytest_collection_modifyitems(config, items):
    """Longest units first (:data:`LONGEST_FIRST`, a TOGETHER unit by the sum of its files); a stable sort: each
    file's tests keep their order, unlisted files theirs."""
    unit_cost: dict[str, int] = {}
    for path, seconds in LONGEST_FIRST.items():
        unit_cost[_unit(path)] = unit_cost.get(_unit(path), 0) + seconds

    def cost(item):
        return -unit_cost.get(_unit(item.nodeid.split("::", 1)[0]), 0)

    items.sort(key=cost)

class CLIResult:
    """What one in-process ``cachetool`` call returned: exit code, stdout, stderr."""

    def __init__(self, rc, out, err):
        self.rc, self.out, self.err = rc, out, err

    def __repr__(self):
        return f"rc={self.rc}\nout={self.out}\nerr={self.err}"

    def error_line(self) -> str:
        """The one ``error:`` line (asserts there is exactly one, and that it is short)."""
        lines = [ln for ln in self.err.splitlines() if ln.startswith("error: ")]
        assert len(lines) == 1, self
        assert len(lines[0]) < 400, lines[0]
        return lines[0]


@pytest.fixture
def cli(capsys):
    """Run ``cachetool ARGS...`` in this process (fast: torch is imported once) and capture its output."""
    from cachetool.cli import main

    def run(*args) -> CLIResult:
        capsys.readouterr()
        rc = main([str(a) for a in args])
        c = capsys.readouterr()
        return CLIResult(rc, c.out, c.err)

    return run

