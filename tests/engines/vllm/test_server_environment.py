"""The server's environment (issue 34 item 6): a vLLM server reads the root's triton_cache/ only through
TRITON_CACHE_DIR (25.7 s instead of 7.05 s of engine init on the H200 without it). pull prints the environment its
server needs; check names what the environment it runs in would miss, and what it costs."""

from __future__ import annotations

import json

from cachetool.cache_root import CacheRoot
from cachetool.engines import get
from cachetool.engines.vllm.server_env import environment_notes


def _root_with_triton_kernels(tmp_path, n=3):
    root = tmp_path / "root"
    for i in range(n):
        (root / "triton_cache" / f"K{i}").mkdir(parents=True)
    return root.resolve()


def test_check_names_a_missing_triton_cache_dir_and_its_cost(tmp_path, monkeypatch):
    root = _root_with_triton_kernels(tmp_path)
    wanted = get("vllm").server_environment(root)
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(root))
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    (note,) = environment_notes(root, wanted, CacheRoot.of(None, get("vllm")))
    assert note.startswith("TRITON_CACHE_DIR is unset") and "3 Triton kernel(s)" in note
    assert f"TRITON_CACHE_DIR={root / 'triton_cache'}" in note
    monkeypatch.setenv("TRITON_CACHE_DIR", str(root / "triton_cache"))
    assert environment_notes(root, wanted, CacheRoot.of(None, get("vllm"))) == []


def test_check_names_a_server_that_would_read_another_root(tmp_path, monkeypatch):
    root = _root_with_triton_kernels(tmp_path, n=0)
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "elsewhere"))
    (note,) = environment_notes(root, get("vllm").server_environment(root), CacheRoot.of(None, get("vllm")))
    assert "reads another cache root" in note and f"VLLM_CACHE_ROOT={root}" in note


def test_a_root_without_triton_kernels_needs_no_triton_cache_dir(tmp_path, monkeypatch):
    """On the CPU vLLM JIT-compiles no Triton kernel: nothing to warn about."""
    root = (tmp_path / "root").resolve()
    root.mkdir()
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(root))
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    assert environment_notes(root, get("vllm").server_environment(root), CacheRoot.of(None, get("vllm"))) == []


def test_pull_prints_the_environment_its_server_needs(tmp_path, cli):
    from cachetool.bundle.packing import pack
    from cachetool.bundle.signing import generate_keypair, load_private_key
    from cachetool.transfer.push import push
    from tests.cache_trees import make_native_tree

    priv, pub, _ = generate_keypair(tmp_path / "k")
    with pack(make_native_tree(tmp_path / "tree", ranks=("rank_0_0",), layers=2), sign_key=load_private_key(priv)) as b:
        push(b, f"file://{tmp_path}/store/m:v1")
    root = tmp_path / "root"
    r = cli("pull", f"file://{tmp_path}/store/m:v1", "--cache-root", root, "--trust", pub, "--json")
    assert r.rc == 0, r
    assert json.loads(r.out)["server_env"] == {"CACHETOOL_CACHE_ROOT": str(root.resolve())}
    r = cli("pull", f"file://{tmp_path}/store/m:v1", "--cache-root", root, "--trust", pub)
    assert f"server environment: CACHETOOL_CACHE_ROOT={root.resolve()}" in r.out
