"""Shared test setup. The real S3 (Ceph RGW) and OCI (docker-registry) servers live in tests/servers.py as
session-scoped fixtures: started on 127.0.0.1 on first use, one of each for the whole run (all xdist workers),
stopped by pid when the run ends (tests/server_run.py).

Expensive things that several files use read-only (a cold compile of the tiny model) are built once per test run
for all xdist workers (:func:`shared_build`), not once per worker or per file."""

pytest_plugins = ["tests.server_run", "tests.servers"]


import fcntl
import itertools
import json
import os
import shutil
import traceback
from pathlib import Path

import pytest

import cachetool.engines  # noqa: F401 - the engines register with the core, as any program using cachetool has them


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
        from tests.cli_calls import cli_env, run_cli

        generate_keypair(d / "signing.key")
        proc = run_cli(
            "warm",
            "--model",
            "tiny",
            "--device",
            "cpu",
            "--cache-root",
            str(d / "root"),
            "--push",
            f"file://{d}/store/tiny:ci",
            "--sign-key",
            str(d / "signing.key"),
            "--json",
            env=cli_env(CACHETOOL_LOGGING_LEVEL="DEBUG"),
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        (d / "summary.json").write_text(proc.stdout.strip().splitlines()[-1])
        (d / "stderr.txt").write_text(proc.stderr)

    d = shared_build(tmp_path_factory, "tiny_warm", build)
    return {
        "dir": d,
        "root": d / "root",
        "summary": json.loads((d / "summary.json").read_text()),
        "stderr": (d / "stderr.txt").read_text(),
        "ref": f"file://{d}/store/tiny:ci",
        "store": d / "store",
        "key": d / "signing.key",
        "pub": d / "signing.key.pub",
    }


@pytest.fixture(scope="session")
def warmed_root(tiny_warm: dict) -> tuple[Path, dict, str]:
    """The run's one cold ``cachetool warm`` of the tiny model in a fresh root (a separate process, DEBUG logs;
    ``tiny_warm``, which also pushed it). Returns (root, the compile's --json object, stderr).
    Shared by every worker: read it, or copy it before a start on it (a load writes into its Inductor cache)."""
    return tiny_warm["root"], tiny_warm["summary"]["compile"], tiny_warm["stderr"]


# --------------------------------------------------------------------------------------------- scheduling
# A unit of work (what xdist hands one worker at a time) is a test file, or a group of tests marked
# ``xdist_group(name)`` under ``--dist loadgroup`` (scripts/test.sh): the verdict table's parts
# (tests/engines/vllm/real/test_real_server.py), so that its real server starts spread over the workers instead of
# keeping one worker busy for the whole table while the others idle.
#
# xdist hands a worker the next unit in collection order when it is nearly done, so a long unit that starts late
# keeps one worker busy while the others idle: the long units go first. What makes a unit long is read from what its
# tests do, never from timings (they change with the machine and the code). The kinds, longest first: a test that
# starts real vLLM (marked ``vllm``), one that compiles a real model (``slow``), one that uses the real S3 or OCI
# server (a fixture of tests/servers.py: :data:`SERVER_FIXTURES`). A unit is of its longest test's kind; within a
# kind, more such tests first. The two longest kinds take turns, so that the workers' first units neither all wait
# on the same shared build (the vLLM warm, the tiny model's) nor all start vLLM at once; the rest keep their order.
SERVER_FIXTURES = frozenset(
    {"rgw", "oci_registry", "oci_registry_auth", "oci_mirror", "oci_registry_tls", "own_registry"}
)
VLLM, COMPILES, SERVERS, QUICK = range(4)
TAKE_TURNS = (VLLM, COMPILES)


def _kind(item) -> int:
    if item.get_closest_marker("vllm"):
        return VLLM
    if item.get_closest_marker("slow"):
        return COMPILES
    if SERVER_FIXTURES & set(item.fixturenames):
        return SERVERS
    return QUICK


def long_units_first(units: dict[str, list[int]]) -> list[str]:
    """The units (name: its tests' kinds, in collection order) in the order they should start."""
    kinds: dict[int, list[str]] = {kind: [] for kind in (VLLM, COMPILES, SERVERS, QUICK)}
    for unit, tests in units.items():
        kinds[min(tests)].append(unit)
    for kind, names in kinds.items():
        if kind != QUICK:
            names.sort(key=lambda unit: -units[unit].count(kind))  # stable: ties keep collection order
    turns = [unit for row in itertools.zip_longest(*(kinds[k] for k in TAKE_TURNS)) for unit in row if unit]
    return turns + kinds[SERVERS] + kinds[QUICK]


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's --dist loadfile, with the tests of an ``xdist_group`` as a unit of their own under --dist
    loadgroup (xdist then ends their node ids with ``@group``); --dist loadfile keeps whole files."""
    if config.getvalue("dist") not in ("loadfile", "loadgroup"):
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.rfind("@") > nodeid.rfind("]"):  # an '@' inside a parameter's id is not a group
                return nodeid.rsplit("@", 1)[1]
            return nodeid.split("::", 1)[0]

    return Scheduling(config, log)


def pytest_configure(config):
    # xdist would sort the units by their number of tests (a 2-test file that runs 5 minutes goes last); keep
    # the order below instead (the same as passing --no-loadscope-reorder)
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def _unit(item) -> str:
    """The unit of work a test belongs to: its ``xdist_group``, or its file."""
    group = item.get_closest_marker("xdist_group")
    return str(group.args[0]) if group else item.nodeid.split("::", 1)[0]


@pytest.hookimpl(trylast=True)  # after the folders' conftests have marked their tests (vllm: engines/vllm/real/)
def pytest_collection_modifyitems(config, items):
    """Long units first (:func:`long_units_first`); each unit's tests keep their order. With --dist loadgroup the
    verdict parts' tests come one part after another (as the scheduler takes them)."""
    units: dict[str, list[int]] = {}
    for item in items:
        units.setdefault(_unit(item), []).append(_kind(item))
    place = {unit: i for i, unit in enumerate(long_units_first(units))}
    items.sort(key=lambda item: place[_unit(item)])


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


@pytest.fixture
def blobs_on_disk(monkeypatch):
    """Every blob of an install fetched into a file, as a blob over ``IN_MEMORY_MAX`` is (a partial download that a
    rerun resumes, a file expanded from): the tests' bundles hold small blobs, which the installer reads into memory."""
    from cachetool.install import blobs

    monkeypatch.setattr(blobs, "IN_MEMORY_MAX", 0)
