"""vLLM releases (issue 35): the facts of the vLLM that runs (``CACHETOOL_VLLM_PYTHON``'s, not cachetool's own), a
release outside the tested ones named in one line before any work, a release laid out otherwise refused naming
what is missing, and every log line cachetool still reads checked against the installed release's own source.

The whole flow per release is ``scripts/vllm_matrix.sh`` (``benchmarks/vllm_matrix.py``), which runs this file's
source check against each release too. A release that is not installed here is stood in for by a package named
``vllm`` holding only ``_version.py`` on the interpreter's path: the smallest install cachetool cannot read.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from cachetool.engines.vllm import install_facts, launch, releases, worker_facts
from tests.engines.vllm.real.conftest import FLAGS, cachetool, error_line, write_model
from tests.vllm_oracle import server

UNTESTED = "0.99.0"


@pytest.fixture
def untested_vllm(tmp_path) -> Path:
    """An interpreter (cachetool's own, behind a wrapper) whose ``vllm`` is release 0.99.0 with no modules."""
    pkg = tmp_path / "site" / "vllm"
    pkg.mkdir(parents=True)
    (pkg / "_version.py").write_text(f'__version__ = "{UNTESTED}"\n')
    (pkg / "__init__.py").write_text("from vllm._version import __version__\n")
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={pkg.parent}${{PYTHONPATH:+:$PYTHONPATH}} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return python


def test_the_facts_are_those_of_the_interpreter_that_runs_vllm(untested_vllm, monkeypatch):
    """CACHETOOL_VLLM_PYTHON names vLLM's interpreter: its release is what a bundle records and a pull compares,
    whatever cachetool's own venv holds (before, a warm through another venv recorded cachetool's own vLLM)."""
    monkeypatch.setenv("CACHETOOL_VLLM_PYTHON", str(untested_vllm))
    assert install_facts.vllm_version() == UNTESTED
    assert install_facts.machine_facts("cpu")["vllm"] == UNTESTED
    # the wrapper's torch is this one's
    assert install_facts.torch_version() == install_facts.machine_facts("cpu")["torch"]


def test_a_tested_release_is_quiet_and_any_other_is_named_with_the_range():
    first, last = releases.TESTED_CPU[0], releases.TESTED_CPU[-1]
    for inside in (first, last, f"{last}.dev3+g1234.cpu"):
        assert releases.notice(inside, "cpu") is None, inside
    assert releases.notice(None, "cpu") is None  # no vLLM: nothing to say (the verbs say what is missing)
    for outside in ("0.27.0", UNTESTED, "1.0"):
        line = releases.notice(outside, "cpu")
        assert line and "\n" not in line and outside in line and f"{first} to {last}" in line, line
    assert releases.notice(releases.TESTED_CUDA[0], "cuda") is None
    assert "0.26.0" in releases.notice(last, "cuda")  # CUDA and the CPU have their own tested releases


def test_a_release_cachetool_cannot_read_is_refused_in_one_line_after_the_notice(untested_vllm, tmp_path):
    model = write_model(tmp_path / "model")
    root = tmp_path / "root"
    env = {"CACHETOOL_VLLM_PYTHON": str(untested_vllm)}
    r = cachetool("warm", "--engine", "vllm", "--model", model, "--cache-root", root, "--", *FLAGS, env=env)
    assert r.returncode == 2, r
    line = error_line(r)
    assert f"vLLM {UNTESTED}" in line and "cannot read this vLLM release" in line, line
    assert "the server's parser" in line and "make_arg_parser" in line, line  # what is missing, where it was looked
    notice = r.stderr.index(f"vLLM {UNTESTED} on the CPU is outside")
    assert notice < r.stderr.index("error: "), r.stderr  # said first, before any work
    assert not root.exists()


def test_pull_names_an_untested_release_first_and_still_decides(untested_vllm, tmp_path, warmed):
    """The notice is the pull's first line; the pull goes on (here the bundle's vLLM differs: a miss, exit 4)."""
    env = {"CACHETOOL_VLLM_PYTHON": str(untested_vllm)}
    root = tmp_path / "root"
    r = cachetool(
        "pull",
        warmed["ref"],
        "--cache-root",
        root,
        "--trust",
        warmed["pub"],
        "--engine",
        "vllm",
        "--",
        warmed["model"],
        *FLAGS,
        env=env,
    )
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines[0].startswith(f"warning: vLLM {UNTESTED} on the CPU is outside"), r.stderr
    assert r.returncode == 4 and UNTESTED in r.stderr, r.stderr
    assert not root.exists() or not any(root.iterdir())


def test_the_fast_key_check_compares_what_the_release_hashes_whatever_its_name():
    """The launch inputs (the pull's no-vLLM path) keep every variable the warm's vLLM hashed: vLLM <= 0.28 hashes
    VLLM_API_KEY (kept by its digest), every release VERBOSE, vLLM 0.26 folders derived from HOME. Before, a
    server launched with any of them set otherwise got the warm's folder predicted and computed another."""
    env = {"VERBOSE": "1", "VLLM_API_KEY": "s3cret", "HOME": "/home/a", "VLLM_LOGGING_PREFIX": "x"}
    assert launch.launch_env(env) == {}  # none reaches the key unless the release hashes it
    # read while vLLM builds its config, and on torch < 2.12 hashed through Inductor's asserts: kept
    assert launch.launch_env({**env, "VLLM_LOGGING_LEVEL": "DEBUG"}) == {"VLLM_LOGGING_LEVEL": "DEBUG"}
    as_028 = launch.launch_env(env, hashed={"VERBOSE": None, "VLLM_API_KEY": None, "VLLM_USE_AOT_COMPILE": True})
    assert set(as_028) == {"VERBOSE", "VLLM_API_KEY"} and "s3cret" not in str(as_028)
    assert set(launch.launch_env(env, hashed=["VLLM_CONFIG_ROOT"])) == {"HOME"}  # vLLM 0.26


def test_a_starts_facts_are_summed_from_every_workers_report():
    """Rank 0's key folder names the start; the AOT artifact counts as loaded only if every compiled rank loaded
    it; the graphs compiled are Inductor's misses and bypasses on every rank, whatever vLLM's counters say."""

    def worker(rank, key, loaded, inductor, **counters):
        return {
            "rank": rank,
            "aot": [
                {
                    "key": key,
                    "computed_key": key,
                    "loaded": loaded,
                    "path": f"/r/torch_compile_cache/torch_aot_compile/{key}/rank_{rank}_0/model",
                }
            ],
            "vllm_counters": counters,
            "dynamo_unique_graphs": 1,
            "mapped_kernels": [f"/k{rank}.so"],
            "compilation_seconds": 1.5 + rank,
            "inductor": inductor,
        }

    done = worker_facts.from_workers(
        [
            worker(
                0,
                "a" * 64,
                True,
                {"fxgraph_cache_hit": 2},
                num_backend_compilations=3,
                num_inductor_compiles=1,
                num_aot_artifacts_loaded=1,
            ),
            worker(
                1,
                "a" * 64,
                False,
                {"fxgraph_cache_miss": 1, "fxgraph_cache_bypass": 1},
                num_backend_compilations=2,
                num_aot_artifacts_saved=1,
            ),
        ]
    )
    assert done.cache_key == "a" * 64 and done.cache_keys == ["a" * 64] and len(done.aot_paths) == 2
    assert not done.aot_loaded and done.aot_saved and done.aot_artifacts_loaded == 1
    assert (done.graphs_compiled, done.graphs_loaded) == (2, 2)
    assert done.vllm_counters["num_backend_compilations"] == 5 and done.vllm_counters["num_inductor_compiles"] == 1
    assert done.compilation_seconds == 2.5 and done.mapped_kernels == {"/k0.so", "/k1.so"}


# ---------------------------------------------------------------------------------------------- log lines


def format_strings(source: Path, anchor: str) -> list[str]:
    """The string constants (implicit concatenations joined) of a vLLM source file that contain ``anchor``."""
    return [
        n.value
        for n in ast.walk(ast.parse(source.read_text()))
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and anchor in n.value
    ]


def as_logged(fmt: str) -> str:
    """A %-format as vLLM's logger prints it, with sample arguments (a path, seconds, a reason)."""
    return re.sub(r"%(?:\.\d+)?[sdf]", lambda m: "1.25" if m.group(0)[-1] in "df" else "/r/x", fmt)


# Each log line cachetool reads (no fact of vLLM's has it), where the installed vLLM writes it, and the pattern.
LOG_LINES = {
    "vLLM's reason for not loading its AOT artifact": (
        "vllm/compilation/decorators.py",
        "Compiling model again due to a load failure",
        worker_facts.AOT_FAILURE,
    ),
    "the server's engine-init seconds": (
        "vllm/v1/engine/core.py",
        "init engine (profile, create kv cache, warmup model) took",
        server.ENGINE_INIT,
    ),
}


@pytest.mark.parametrize("what", list(LOG_LINES))
def test_every_log_line_cachetool_reads_is_in_the_installed_release(what):
    """Read against the source of the vLLM that runs (``CACHETOOL_VLLM_PYTHON``'s: the matrix runs this test for
    each release): the line is still printed and the pattern still reads it."""
    relpath, anchor, pattern = LOG_LINES[what]
    module = relpath.removesuffix(".py").replace("/", ".")
    source = install_facts.installed_file(module)
    assert source is not None, f"{module} is not in vLLM {install_facts.vllm_version()}"
    found = format_strings(source, anchor)
    assert found, f"vLLM {install_facts.vllm_version()} no longer logs {anchor!r} in {relpath}"
    for fmt in found:
        assert pattern.search(as_logged(fmt)), f"{pattern.pattern!r} does not read {fmt!r}"
