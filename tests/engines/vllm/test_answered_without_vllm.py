"""What the vLLM engine answers without starting vLLM (issue 34): a server that compiles no graph is a hit for
check and nothing to warm (tests/engines/vllm/test_bundles.py has its pulls), and a check on a root without this
server's key folder is a miss in a second, with nothing written. vLLM must be installed (its version is read from
its files; it is not imported)."""

from __future__ import annotations

import json

import pytest

from cachetool.engines.vllm import install_facts, start
from cachetool.engines.vllm.child import process as child_process
from tests.vllm_oracle.tiny import CPU_FLAGS, write_model

pytestmark = pytest.mark.skipif(install_facts.vllm_version() is None, reason="vLLM is not installed")


@pytest.fixture
def no_vllm_start(monkeypatch):
    """A start of vLLM fails the test: these answers must not need one."""

    def refuse(*args, **kwargs):
        raise AssertionError("vLLM was started")

    monkeypatch.setattr(start, "start", refuse)
    monkeypatch.setattr(child_process, "run_child", refuse)


def test_check_of_an_eager_server_is_a_hit_without_starting_vllm(tmp_path, cli, no_vllm_start):
    model = write_model(tmp_path / "m")
    r = cli(
        "check",
        "--engine",
        "vllm",
        "--model",
        model,
        "--cache-root",
        tmp_path / "root",
        "--require-hit",
        "--json",
        "--",
        *CPU_FLAGS,
        "--enforce-eager",
    )
    assert r.rc == 0, r
    doc = json.loads(r.out)
    assert doc["hit"] is True and doc["compiles"] is False and doc["started"] is False, doc
    assert "--enforce-eager" in doc["reason"]


def test_warm_of_an_eager_server_is_refused_before_anything_runs(tmp_path, cli, no_vllm_start):
    model = write_model(tmp_path / "m")
    root = tmp_path / "root"
    r = cli("warm", "--engine", "vllm", "--model", model, "--cache-root", root, "--", *CPU_FLAGS, "-O0")
    assert r.rc == 2, r
    assert "nothing to warm for this command: -O0" in r.err
    assert not root.exists() or not any(root.iterdir())


def test_check_on_a_root_without_a_key_folder_is_a_miss_at_once(tmp_path, cli, no_vllm_start):
    """It compiled for 98 s on the H200 and filled the root before it said miss."""
    model = write_model(tmp_path / "m")
    root = tmp_path / "root"
    root.mkdir()
    r = cli(
        "check", "--engine", "vllm", "--model", model, "--cache-root", root, "--require-hit", "--json", "--", *CPU_FLAGS
    )
    assert r.rc == 4, r
    doc = json.loads(r.out)
    assert doc["started"] is False and doc["hit"] is False and "holds no vLLM key folder" in doc["message"], doc
    assert list(root.iterdir()) == []
