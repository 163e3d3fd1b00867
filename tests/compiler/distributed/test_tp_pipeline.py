"""TP=2 on gloo end to end: two rank folders, outputs equal to TP=1, a hot start with zero compiles on each
rank, ``--require-hit`` failing when one rank would compile, the TP size in the hash, pack/install by rank."""

from __future__ import annotations

import filecmp
import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.cli_calls import cli_env, run_cli
from tests.compiler.distributed.conftest import last_json

pytestmark = pytest.mark.slow


def _same_tree(a: Path, b: Path) -> bool:
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.diff_files or cmp.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    return not mismatch and not errors and all(_same_tree(a / d, b / d) for d in cmp.common_dirs)


def test_two_rank_folders(tp_warm) -> None:
    root, res = tp_warm
    assert res["tensor_parallel_size"] == 2 and len(res["ranks"]) == 2
    hash_dir = root.resolve() / "torch_compile_cache" / res["cache_key"]
    assert sorted(p.name for p in hash_dir.iterdir()) == ["rank_0_0", "rank_1_0"]
    for r, rank in enumerate(res["ranks"]):
        d = hash_dir / f"rank_{r}_0" / "backbone"
        assert rank["rank_dir"] == str(d.parent) and rank["cache_dir"] == str(d)
        assert rank["graphs_compiled"] == 3 and rank["pieces"] == 5  # 5 pieces, 3 unique, on every rank
        for name in ("cache_key_factors.json", "computation_graph.py", "compile_index.json"):
            assert (d / name).is_file(), name
        assert list((d / "inductor_cache").rglob("*.so"))
    assert res["graphs_compiled"] == 6
    # The all-reduce is in the compiled graph (part of what is cached), not a graph break.
    graph = (hash_dir / "rank_0_0" / "backbone" / "computation_graph.py").read_text()
    assert "_c10d_functional.all_reduce" in graph and "wait_tensor" in graph
    # Same pieces on every rank: rank 1's folder was made a byte copy of rank 0's (stored once in a bundle).
    assert [r["shared"] for r in res["ranks"]] == ["source", "shared"]
    assert _same_tree(hash_dir / "rank_0_0", hash_dir / "rank_1_0")


def test_outputs_equal_tp1(tp_warm) -> None:
    from compiler.config import CompilationConfig
    from compiler.runner import ModelRunner

    _, res = tp_warm
    ref = ModelRunner("tiny", "cpu", CompilationConfig(mode=0))  # TP=1, eager, same seed
    ref.warmup()
    want = ref.run_workload()
    for rank in res["ranks"]:  # the logits are gathered: every rank sees the full vocabulary
        got = rank["workload"]
        assert got["token_counts"] == want.token_counts
        torch.testing.assert_close(
            torch.tensor(got["logits_sample"]), torch.tensor(want.logits_sample), rtol=1e-4, atol=1e-5
        )
        assert got["logits_sum"] == pytest.approx(want.logits_sum, rel=1e-4)


def test_hot_start_compiles_nothing_on_each_rank(tp_warm) -> None:
    root, warm = tp_warm
    proc = run_cli(
        "check",
        "--model",
        "tiny",
        "--cache-root",
        str(root),
        "-tp",
        "2",
        "--require-hit",
        "--json",
        env=cli_env(CACHETOOL_LOGGING_LEVEL="DEBUG"),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    check = last_json(proc.stdout)
    assert check["hit"] is True and check["graphs_compiled"] == 0 and check["cache_key"] == warm["cache_key"]
    assert [r["rank_dir"] for r in check["ranks"]] == [r["rank_dir"] for r in warm["ranks"]]
    for rank in check["ranks"]:
        assert rank["graphs_compiled"] == 0 and rank["graphs_loaded"] == 3
        assert rank["graphs_loaded"] + rank["graphs_reused"] == rank["pieces"] == 5
        assert rank["workload"]["checksum"] == warm["workload"]["checksum"]
    assert "store the" not in proc.stderr and "Directly load the 0-th graph" in proc.stderr


def test_require_hit_fails_when_one_rank_would_compile(tp_warm, tmp_path: Path) -> None:
    root, warm = tp_warm
    copy = tmp_path / "root"
    shutil.copytree(root, copy, symlinks=True)
    shutil.rmtree(copy / "torch_compile_cache" / warm["cache_key"] / "rank_1_0")
    proc = run_cli(
        "check", "--model", "tiny", "--cache-root", str(copy), "-tp", "2", "--require-hit", env=cli_env(), timeout=300
    )
    assert proc.returncode == 8, proc.stderr[-3000:]
    assert "error:" in proc.stderr and "strict mode" in proc.stderr
    assert not list((copy / "torch_compile_cache" / warm["cache_key"]).glob("rank_1_0/**/artifact_*"))


def test_tensor_parallel_size_is_hashed_and_dp_rank_names_the_folder(tp_warm) -> None:
    from compiler.runner import compute_cache_key

    root, warm = tp_warm
    factors = json.loads((Path(warm["cache_dir"]) / "cache_key_factors.json").read_text())
    parallel = factors["factors"]["config"]["values"]["model_config"]["parallel_config"]
    assert parallel == {"tensor_parallel_size": 2, "all_reduce": "functional"}
    key, layout = compute_cache_key("tiny", "cpu", dp_rank=1)  # TP=1: another hash; dp rank in the folder name
    assert key.hash != warm["cache_key"]
    assert key.factors.values("config")["model_config"]["parallel_config"]["tensor_parallel_size"] == 1
    assert layout.rank_dir.name == "rank_0_1"
    helptext = run_cli("warm", "--help").stdout
    assert "--tensor-parallel-size" in helptext and "--data-parallel-rank" in helptext


def test_pack_stores_ranks_once_and_install_picks_ranks(tp_warm, tmp_path: Path) -> None:
    from cachetool.bundle.ctb import open_ctb, write_ctb
    from cachetool.bundle.packing import pack
    from cachetool.install import InstallOptions, install_bundle

    root, warm = tp_warm
    hash_dir = root / "torch_compile_cache" / warm["cache_key"]
    with pack(hash_dir) as bundle:
        m = bundle.manifest
        assert sorted(m.ranks) == ["rank_0_0", "rank_1_0"]
        raw = sum(f.size for f in m.files)
        unique = sum(b.size for b in m.blobs)
        # The second rank costs (almost) nothing: its folder is a byte copy of rank 0's, except the few
        # Inductor cache entries that the hot start above wrote into each rank folder while loading.
        assert unique < 0.55 * raw
        ctb = write_ctb(bundle, tmp_path / "tp2.ctb")
    dest = tmp_path / "node1"
    with open_ctb(ctb) as src:
        res = install_bundle(src, dest, InstallOptions(ranks="1", insecure_skip_verify=True))
    assert res.units_installed
    ranks = sorted(p.name for p in (dest / "torch_compile_cache" / warm["cache_key"]).iterdir())
    assert ranks == ["rank_1_0"]


def test_pull_model_predicts_the_tensor_parallel_key(tp_warm, tmp_path: Path) -> None:
    """Issue 12: ``pull --model --tensor-parallel-size 2`` predicts the TP=2 key (the TP=1 prediction misses)."""
    root, warm = tp_warm
    key = tmp_path / "k.key"
    assert run_cli("keygen", "-o", str(key)).returncode == 0
    ref = f"file://{tmp_path / 'store'}/tiny:tp2"
    assert run_cli("push", str(root), ref, "--sign-key", str(key)).returncode == 0
    fresh = tmp_path / "fresh"
    args = ("pull", ref, "--cache-root", str(fresh), "--trust", str(key) + ".pub", "--model", "tiny")
    tp1 = run_cli(*args)
    assert tp1.returncode == 4 and "'model_config.parallel_config." in tp1.stderr, tp1.stderr[-2000:]
    tp2 = run_cli(*args, "--tensor-parallel-size", "2", "--json")
    assert tp2.returncode == 0, tp2.stderr[-2000:]
    assert f"cache key {warm['cache_key']}" in json.loads(tp2.stdout)["install"]["preflight"]
