"""The compile pipeline end to end on the CPU with the tiny model (real Inductor compiles)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from compiler.capture import RecompileError
from compiler.config import CompilationConfig
from compiler.counters import counters
from compiler.piecewise_backend import DynamicShapeGuardError
from compiler.runner import ModelRunner
from tests.cli_calls import cli_env, run_cli, run_json

pytestmark = pytest.mark.slow

TOKEN_COUNTS = (1, 2, 7, 64)


def _run_counts(runner: ModelRunner, counts=TOKEN_COUNTS) -> list[torch.Tensor]:
    out = []
    for n in counts:
        seq = runner.add_sequence(list(range(1, n + 1)))
        out.append(runner.step([seq]).logits)
        runner.free(seq)
    return out


def test_cold_warm_layout_and_logs(warmed_root) -> None:
    root, result, stderr = warmed_root
    assert result["graphs_compiled"] == 3 and result["graphs_loaded"] == 0
    assert result["pieces"] == 5 and result["unique_pieces"] == 3 < result["pieces"]
    d = Path(result["cache_dir"])
    assert d == root.resolve() / "torch_compile_cache" / result["cache_key"] / "rank_0_0" / "backbone"
    assert result["rank_dir"] == str(d.parent)
    for name in ("cache_key_factors.json", "computation_graph.py", "transformed_code.py", "compile_index.json"):
        assert (d / name).is_file(), name
    factors = json.loads((d / "cache_key_factors.json").read_text())
    assert factors["schema"] == 1 and factors["hash"] == result["cache_key"]
    assert set(factors["factors"]) == {"env", "config", "code", "compiler"}
    index = json.loads((d / "compile_index.json").read_text())
    assert len(index["pieces"]) == 5 and len({p["artifact"] for p in index["pieces"].values()}) == 3
    assert all((d / p["artifact"]).is_file() and p["format"] == "binary" for p in index["pieces"].values())
    assert list((d / "inductor_cache").rglob("*.so")), "compiled .so files live in the rank folder"


def test_cold_start_logs_in_the_seeds_words(warmed_root) -> None:
    """Issue 2 item 5: vLLM's log lines (DEBUG level from CACHETOOL_LOGGING_LEVEL), naming the real paths."""
    root, result, stderr = warmed_root
    d = Path(result["cache_dir"])
    assert re.search(
        r'Start compiling function <code object forward at 0x[0-9a-f]+, file ".*/compiler/models/'
        r'llama\.py", line \d+>',
        stderr,
    ), stderr[-3000:]
    traced = re.search(
        r"^DEBUG .*Traced files \(to be considered for compilation cache\):\n((?:[^\n]+\.py\n)+)", stderr, re.M
    )
    assert traced, stderr[-3000:]
    files = traced.group(1).splitlines()
    assert any(f.endswith("compiler/models/llama.py") for f in files) and all(Path(f).is_file() for f in files)
    assert f"Using cache directory: {d} for cachetool's torch.compile" in stderr
    assert re.search(
        rf"^DEBUG .*Computation graph saved to {re.escape(str(d / 'computation_graph.py'))}$", stderr, re.M
    )
    stores = re.findall(
        r"^DEBUG .*store the (\d+)-th graph for shape None from inductor_standalone via handle "
        r"\('([0-9a-f]{16})', '([^']+)'\) \(\d+\.\d+ s\)$",
        stderr,
        re.M,
    )
    index = json.loads((d / "compile_index.json").read_text())["pieces"]
    assert len(stores) == 3 and len({i for i, _, _ in stores}) == 3, stores  # the 3 unique pieces, once each
    for i, key, path in stores:
        assert index[i]["graph_hash"].startswith(key) and path == str(d / index[i]["artifact"])
    assert "Directly load the" not in stderr
    assert re.search(r"Compiling/loading 5 pieces \(3 unique\) for dynamic shape took \d+\.\d+ s", stderr)
    assert re.search(r"torch\.compile takes \d+\.\d+ s in total", stderr)


def test_second_process_compiles_nothing(warmed_root, tmp_path) -> None:
    """A second process on a copy of the tree at another path (as after a pull) loads every piece, runs no
    C++ compiler (no new .so file) and computes the same outputs."""
    root, warm, _ = warmed_root
    moved = tmp_path / "elsewhere" / "root"
    shutil.copytree(root, moved, symlinks=True)
    so_before = sorted(p.relative_to(moved) for p in moved.rglob("*.so"))
    proc = run_cli(
        "check",
        "--model",
        "tiny",
        "--cache-root",
        str(moved),
        "--require-hit",
        "--json",
        env=cli_env(CACHETOOL_LOGGING_LEVEL="DEBUG"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    check = json.loads(proc.stdout.strip().splitlines()[-1])
    assert check["graphs_compiled"] == 0 and check["hit"] is True
    assert check["graphs_loaded"] == 3 and check["graphs_loaded"] + check["graphs_reused"] == check["pieces"] == 5
    assert check["cache_key"] == warm["cache_key"]
    assert check["cache_dir"] == warm["cache_dir"].replace(str(root.resolve()), str(moved.resolve()))
    assert sorted(p.relative_to(moved) for p in moved.rglob("*.so")) == so_before, "g++ ran on a hot start"
    assert check["workload"]["token_counts"] == warm["workload"]["token_counts"]
    assert check["workload"]["checksum"] == warm["workload"]["checksum"]
    loads = re.findall(
        r"^DEBUG .*Directly load the (\d+)-th graph for shape None from inductor_standalone via "
        r"handle \('[0-9a-f]{16}', '([^']+)'\) \(\d+\.\d+ s\)$",
        proc.stderr,
        re.M,
    )
    assert len(loads) == 3 and all(Path(path).parent == Path(check["cache_dir"]) for _, path in loads), loads
    assert "store the" not in proc.stderr


def test_outputs_equal_eager(warmed_root, tmp_path) -> None:
    shared, warm, _ = warmed_root
    root = tmp_path / "root"  # the load below writes into the root's Inductor cache; the warm's root is shared
    shutil.copytree(shared, root, symlinks=True)
    eager = ModelRunner("tiny", "cpu", CompilationConfig(mode=0))
    eager.warmup()
    ref = eager.run_workload()
    torch.testing.assert_close(
        torch.tensor(warm["workload"]["logits_sample"]), torch.tensor(ref.logits_sample), rtol=1e-4, atol=1e-5
    )
    compiled = ModelRunner("tiny", "cpu", CompilationConfig(cache_dir=str(root)))
    compiled.warmup()
    got = compiled.run_workload()
    assert got.token_counts == ref.token_counts
    for a, b in zip(got.steps, ref.steps):
        torch.testing.assert_close(a.logits, b.logits, rtol=1e-4, atol=1e-5)
    e2, c2 = _run_counts(eager), _run_counts(compiled)
    for a, b in zip(c2, e2):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_require_hit_on_empty_root_fails(tmp_path) -> None:
    root = tmp_path / "empty"
    proc = run_cli("check", "--model", "tiny", "--cache-root", str(root), "--require-hit")
    assert proc.returncode == 8, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: check: strict mode:") and str(root) in last and "would compile" in last
    assert not list(root.rglob("artifact_*"))  # refused before any piece was built


def test_unpacked_round_trip(tmp_path) -> None:
    root = tmp_path / "unpacked"
    # Warm in this process (Inductor is already warm here: faster than a cold subprocess), check in another.
    import cachetool

    warm = cachetool.warm("tiny", cache_root=root, overrides=["compile_cache_save_format=unpacked"]).compile.to_json()
    assert warm["graphs_compiled"] == 3
    d = Path(warm["cache_dir"])
    index = json.loads((d / "compile_index.json").read_text())
    assert all(p["format"] == "unpacked" and (d / p["artifact"]).is_dir() for p in index["pieces"].values())
    # Binary is the default on the next start: the recorded format wins, so the unpacked artifacts load.
    check = run_json("check", "--model", "tiny", "--cache-root", str(root), "--require-hit")
    assert check["graphs_compiled"] == 0 and check["graphs_loaded"] == 3
    assert check["cache_key"] == warm["cache_key"]
    assert check["workload"]["checksum"] == warm["workload"]["checksum"]


def test_disable_switch_writes_nothing(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CACHETOOL_DISABLE_COMPILE_CACHE", "1")
    root = tmp_path / "root"
    before = counters.snapshot()
    runner = ModelRunner("tiny", "cpu", CompilationConfig(cache_dir=str(root)))
    runner.warmup()
    _run_counts(runner)
    delta = counters.delta(before)
    assert delta.graphs_compiled == 3 and delta.graphs_loaded == 0
    assert not root.exists()
    assert runner.backend.layout is None


@pytest.mark.parametrize("shape_type", ["backed", "unbacked", "backed_size_oblivious"])
def test_token_counts_do_not_recompile(tmp_path, shape_type: str) -> None:
    cfg = CompilationConfig.from_dict({"cache_dir": str(tmp_path), "dynamic_shapes_config": {"type": shape_type}})
    before = counters.snapshot()
    runner = ModelRunner("tiny", "cpu", cfg)
    runner.warmup()
    _run_counts(runner, TOKEN_COUNTS + (3, 1))
    delta = counters.delta(before)
    assert delta.dynamo_compiles == 1, "no Dynamo recompilation for 1, 2, 7, 64 tokens"
    assert delta.graphs_compiled == 3


def test_dynamo_trace_once_mode_does_not_recompile() -> None:
    before = counters.snapshot()
    runner = ModelRunner("tiny", "cpu", CompilationConfig(mode=2))
    runner.warmup()
    _run_counts(runner)
    delta = counters.delta(before)
    assert delta.dynamo_compiles == 1 and delta.graphs_compiled == 0


def test_evaluate_guards_unbacked_serves_all_counts(tmp_path) -> None:
    cfg = CompilationConfig.from_dict(
        {"cache_dir": str(tmp_path), "dynamic_shapes_config": {"type": "unbacked", "evaluate_guards": True}}
    )
    before = counters.snapshot()
    runner = ModelRunner("tiny", "cpu", cfg)
    runner.warmup()
    _run_counts(runner)
    assert counters.delta(before).dynamo_compiles == 1


def test_evaluate_guards_backed_refuses_one_token(tmp_path) -> None:
    """Backed shapes specialise 0/1 (the graph is valid for >= 2 tokens); with guards evaluated torch refuses
    the recompile that a 1-token batch needs, instead of silently recompiling."""
    cfg = CompilationConfig.from_dict(
        {"cache_dir": str(tmp_path), "dynamic_shapes_config": {"type": "backed", "evaluate_guards": True}}
    )
    runner = ModelRunner("tiny", "cpu", cfg)
    runner.warmup()
    _run_counts(runner, (2, 7, 64))
    with pytest.raises(RecompileError, match="Detected recompile when torch.compile stance is 'fail_on_recompile'"):
        _run_counts(runner, (1,))


def test_evaluate_guards_size_oblivious_refused_at_trace(tmp_path) -> None:
    """With size-oblivious reasoning torch still adds a guard ``Ne(s, 1)`` while tracing this model;
    evaluate_guards turns it into a compile-time failure."""
    cfg = CompilationConfig.from_dict(
        {
            "cache_dir": str(tmp_path),
            "dynamic_shapes_config": {"type": "backed_size_oblivious", "evaluate_guards": True},
        }
    )
    runner = ModelRunner("tiny", "cpu", cfg)
    with pytest.raises(
        DynamicShapeGuardError, match=r"evaluate_guards: tracing added guards on dynamic shapes: .*Ne\("
    ):
        runner.warmup()


@pytest.fixture(scope="module")
def sized(tmp_path_factory):
    """One start with ``compile_sizes: [4]`` in this process (a fresh root): the runner, the counters' delta of its
    start-up and the root. Its tests read the runner's state and the root; a hot start on the root writes nothing."""
    root = tmp_path_factory.mktemp("sized_root")
    cfg = CompilationConfig.from_dict({"cache_dir": str(root), "compile_sizes": [4]})
    before = counters.snapshot()
    runner = ModelRunner("tiny", "cpu", cfg)
    runner.warmup()
    return runner, counters.delta(before), root


def test_compile_sizes_static_pieces(sized) -> None:
    """``compile_sizes``: per-size static pieces are compiled at start-up (warmup runs each size), indexed as
    ``i@size`` and give eager's outputs; other sizes use the general pieces."""
    runner, delta, _ = sized
    assert delta.graphs_compiled == 6 and delta.dynamo_compiles == 1  # 3 general + 3 for size 4
    index = json.loads((runner.backend.layout.index_file).read_text())
    assert sorted(k for k in index["pieces"] if "@" in k) == [f"{i}@4" for i in range(5)]
    eager = ModelRunner("tiny", "cpu", CompilationConfig(mode=0))
    after_start = counters.snapshot()
    for a, b in zip(_run_counts(runner, (4, 5)), _run_counts(eager, (4, 5))):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert counters.delta(after_start).graphs_compiled == 0  # 4 and 5 tokens: no compile after start-up


def test_compile_sizes_pieces_saved_and_loaded_by_a_second_process(sized) -> None:
    """``compile_sizes`` adds a static-shape compile of every piece (plain Inductor on the CPU: max-autotune is
    used on CUDA only); a second process loads those pieces too and compiles nothing. (Was in
    test_cuda_graph_logic.py with a warm of its own; the start above is that warm.)"""
    _, delta, root = sized
    assert delta.graphs_compiled == 6  # tiny: 5 pieces, 3 unique; general + size 4 -> 6 compiles
    index = json.loads(next(root.rglob("compile_index.json")).read_text())
    sized_pieces = {k: v for k, v in index["pieces"].items() if k.endswith("@4")}
    assert len(sized_pieces) == 5 and all(v["shape"] == 4 and "_s4_" in v["artifact"] for v in sized_pieces.values()), (
        sized_pieces
    )
    hot = run_json("check", "--model", "tiny", "--cache-root", str(root), "-cc.compile_sizes=[4]", "--require-hit")
    assert hot["graphs_compiled"] == 0 and hot["graphs_loaded"] == 6, hot
    assert hot["hot_path"] == "aot" and hot["dynamo_traces"] == 0, hot  # compile_sizes on top of the AOT entry
