"""The deploy path end to end on the CPU, each step its own process, as CI, the deploy pipeline and the
init-container run it:

    cachetool warm --push  (CI job)  →  store (file, S3 on Ceph RGW, OCI on docker-registry)
    cachetool pull         (init-container, fresh cache root)
    cachetool check --require-hit  (the server start: nothing may compile; outputs equal the warm process's)

The tiny model is warmed once for the run (one compile, shared with the compiler and store tests); the other
stores get the same cache folder through ``cachetool push``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ENV_BASE = {**os.environ, "TORCHINDUCTOR_VEC_ISA_OK": "1", "CACHETOOL_LOGGING_LEVEL": "WARNING"}


def cachetool(*args, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cachetool", *map(str, args)],
        capture_output=True,
        text=True,
        env={**ENV_BASE, **(env or {})},
        timeout=timeout,
    )


def ok(r: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
    return r


def last_json(text: str) -> dict:
    """The JSON object a --json command printed (one line, or indented over several)."""
    start = text.index("{")
    return json.loads(text[start:])


@pytest.fixture(scope="module")
def warmed(tiny_warm):
    """`cachetool warm --push file://...` once: the CI job (the run's shared cold warm, ``tiny_warm`` in
    tests/conftest.py: its own process, a fresh root). Returns paths, the warm summary and the keys."""
    summary = tiny_warm["summary"]
    return {
        "base": tiny_warm["dir"],
        "ref": tiny_warm["ref"],
        "summary": summary,
        "key": tiny_warm["key"],
        "pub": tiny_warm["pub"],
        "hash_dir": Path(summary["compile"]["rank_dir"]).parent,
    }


def pull_and_check(warmed, ref: str, root: Path, env: dict | None = None) -> dict:
    """The init-container (pull into a fresh root) then the server start (check --require-hit)."""
    assert not root.exists()
    r = ok(
        cachetool(
            "pull",
            ref,
            "--cache-root",
            root,
            "--trust",
            warmed["pub"],
            "--device",
            "cpu",
            "--on-miss",
            "fail",
            "--timeout",
            "300",
            "--json",
            env=env,
        )
    )
    pulled = last_json(r.stdout)
    assert pulled["outcome"] == "installed" and pulled["install"]["verified"] is True
    c = ok(cachetool("check", "--model", "tiny", "--device", "cpu", "--cache-root", root, "--require-hit", "--json"))
    return last_json(c.stdout)


def assert_hot_and_equal(check: dict, warmed: dict) -> None:
    warm = warmed["summary"]["compile"]
    assert check["graphs_compiled"] == 0
    assert check["graphs_loaded"] == warm["graphs_compiled"] > 0
    assert check["cache_key"] == warm["cache_key"]
    # same batches, same random weights (seeded): the server's outputs equal the warm process's
    assert check["workload"]["token_counts"] == warm["workload"]["token_counts"]
    assert check["workload"]["checksum"] == warm["workload"]["checksum"]


def test_warm_push_summary(warmed):
    s = warmed["summary"]
    assert s["graphs_compiled"] > 0 and s["graphs_loaded"] == 0
    assert s["push"]["signed"] is True and s["push"]["blobs_uploaded"] == s["push"]["blobs_total"] > 0
    assert s["bytes"]["raw"] >= s["bytes"]["unique"] > 0 and s["bytes"]["stored"] > 0
    assert set(s["phases"]) == {"warm", "pack", "push"}  # "compile" is only ever the compile phase
    assert s["ref"] == warmed["ref"] and s["manifest_digest"].startswith("sha256:")


def test_file_store_pull_then_server_compiles_nothing(warmed, tmp_path):
    assert_hot_and_equal(pull_and_check(warmed, warmed["ref"], tmp_path / "server-root"), warmed)


def test_s3_store_pull_then_server_compiles_nothing(warmed, rgw, tmp_path):
    env = rgw.env()
    ref = f"s3://{rgw.make_bucket()}/bundles/tiny:ci"
    pushed = last_json(
        ok(cachetool("push", warmed["hash_dir"], ref, "--sign-key", warmed["key"], "--json", env=env)).stdout
    )
    assert pushed["blobs_uploaded"] > 0 and pushed["signed"]
    assert_hot_and_equal(pull_and_check(warmed, ref, tmp_path / "server-root", env=env), warmed)


def test_oci_store_pull_then_server_compiles_nothing(warmed, oci_registry, tmp_path):
    ref = f"{oci_registry.repo_url('cachetool/tiny')}:ci"
    pushed = last_json(ok(cachetool("push", warmed["hash_dir"], ref, "--sign-key", warmed["key"], "--json")).stdout)
    assert pushed["blobs_uploaded"] > 0 and pushed["signed"]
    assert_hot_and_equal(pull_and_check(warmed, ref, tmp_path / "server-root"), warmed)


def _store_without_blobs(warmed, tmp_path) -> str:
    """A copy of the file store with every blob removed: a pull that fetched any blob would fail with
    'not found' (exit 5) instead of the preflight miss (exit 4), so exit 4 proves nothing was downloaded."""
    store = tmp_path / "store"
    shutil.copytree(warmed["base"] / "store", store)
    shutil.rmtree(store / "blobs")
    return f"file://{store}/tiny:ci"


def test_changed_config_field_refused_before_any_blob_names_the_field(warmed, tmp_path):
    ref = _store_without_blobs(warmed, tmp_path)
    root = tmp_path / "server-root"
    r = cachetool(
        "pull",
        ref,
        "--cache-root",
        root,
        "--trust",
        warmed["pub"],
        "--device",
        "cpu",
        "--model",
        "tiny",
        "-cc.dynamic_shapes_config.type=unbacked",
    )
    assert r.returncode == 4, r.stderr
    error = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1
    assert "compilation_config.dynamic_shapes_config.type" in error[0]
    assert "'backed'" in error[0] and "'unbacked'" in error[0]
    assert not root.exists()


def test_changed_config_with_on_miss_continue_exits_zero_and_says_so(warmed, tmp_path):
    ref = _store_without_blobs(warmed, tmp_path)
    root = tmp_path / "server-root"
    r = cachetool(
        "pull",
        ref,
        "--cache-root",
        root,
        "--trust",
        warmed["pub"],
        "--device",
        "cpu",
        "--model",
        "tiny",
        "-cc.dynamic_shapes_config.type=unbacked",
        "--on-miss",
        "continue",
    )
    assert r.returncode == 0, r.stderr
    assert "outcome=miss" in r.stderr and "on_miss=continue" in r.stderr
    assert "continuing without it" in r.stderr
    assert not root.exists()


def test_same_config_with_model_preflight_installs(warmed, tmp_path):
    """--model with the warm's own config passes the cache-key preflight (the check is not a blanket refusal)."""
    root = tmp_path / "server-root"
    r = ok(
        cachetool(
            "pull",
            warmed["ref"],
            "--cache-root",
            root,
            "--trust",
            warmed["pub"],
            "--device",
            "cpu",
            "--model",
            "tiny",
            "--json",
        )
    )
    doc = last_json(r.stdout)
    assert f"cache key {warmed['summary']['compile']['cache_key']}" in doc["install"]["preflight"]
    assert (root / "torch_compile_cache" / warmed["summary"]["compile"]["cache_key"]).is_dir()
