"""CUDA-graph logic that needs no GPU: capture sizes, padding, dispatch, mode resolution, config errors,
attention under padding (emulated graphs on the CPU). compile_sizes pieces saved and loaded across processes:
tests/compiler/test_pipeline.py (one compile_sizes start for both of its compile_sizes tests)."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from compiler.config import CompilationConfig, CompilationMode, ConfigError, CUDAGraphMode, default_capture_sizes
from compiler.cudagraph_dispatcher import (
    AttentionCGSupport,
    BatchDescriptor,
    CudagraphDispatcher,
    padded_size,
    resolve_capture_sizes,
    resolve_cudagraph_mode,
)

# ---------------------------------------------------------------------- capture sizes


def test_default_capture_size_rule() -> None:
    sizes = default_capture_sizes()
    assert sizes == [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))
    assert sizes[-1] == 512 and len(sizes) == 3 + 31 + 17
    assert default_capture_sizes(300) == [1, 2, 4] + list(range(8, 256, 8)) + [256, 272, 288]
    assert default_capture_sizes(20) == [1, 2, 4, 8, 16]
    assert default_capture_sizes(1) == [1]
    assert default_capture_sizes(0) == []


def test_resolve_capture_sizes_default_max_and_override() -> None:
    assert resolve_capture_sizes(CompilationConfig()) == default_capture_sizes(512)
    assert resolve_capture_sizes(CompilationConfig(max_cudagraph_capture_size=64)) == default_capture_sizes(64)
    cfg = CompilationConfig(cudagraph_capture_sizes=[16, 3, 3, 1])
    assert resolve_capture_sizes(cfg) == [1, 3, 16]
    # sizes no batch can reach are not captured
    assert resolve_capture_sizes(CompilationConfig(), max_num_tokens=64) == [1, 2, 4] + list(range(8, 65, 8))


def test_config_capture_sizes_follow_the_rule() -> None:
    cfg = CompilationConfig(max_cudagraph_capture_size=300)
    assert cfg.cudagraph_capture_sizes == default_capture_sizes(300)
    assert CompilationConfig.from_dict({"cudagraph_capture_sizes": [8, 2]}).max_cudagraph_capture_size == 8


def test_padding_to_nearest_captured_size() -> None:
    sizes = default_capture_sizes(512)
    assert [padded_size(n, sizes) for n in (1, 2, 3, 4, 5, 8, 9, 255, 256, 257, 500, 512)] == [
        1,
        2,
        4,
        4,
        8,
        8,
        16,
        256,
        256,
        272,
        512,
        512,
    ]
    assert padded_size(513, sizes) is None  # larger batches run without graphs
    assert padded_size(3, []) is None
    with pytest.raises(ValueError):
        padded_size(0, sizes)


# ---------------------------------------------------------------------- dispatch


def test_dispatch_full_and_piecewise() -> None:
    d = CudagraphDispatcher(CUDAGraphMode.FULL_AND_PIECEWISE, [1, 2, 4, 8, 16], max_num_seqs=4)
    assert d.dispatch(3, uniform_decode=True) == (CUDAGraphMode.FULL, BatchDescriptor(4, True))
    # decode batch with more sequences than max_num_seqs keys: piecewise
    assert d.dispatch(6, uniform_decode=True) == (CUDAGraphMode.PIECEWISE, BatchDescriptor(8, False))
    assert d.dispatch(7, uniform_decode=False) == (CUDAGraphMode.PIECEWISE, BatchDescriptor(8, False))
    assert d.dispatch(17, uniform_decode=False) == (CUDAGraphMode.NONE, BatchDescriptor(17, False))
    keys = d.all_keys()
    assert len(keys) == 5 + 3  # piecewise for every size, full decode for 1, 2, 4
    assert keys[0] == (CUDAGraphMode.PIECEWISE, BatchDescriptor(16, False))  # largest first


@pytest.mark.parametrize(
    "mode,decode,mixed",
    [
        (CUDAGraphMode.NONE, CUDAGraphMode.NONE, CUDAGraphMode.NONE),
        (CUDAGraphMode.PIECEWISE, CUDAGraphMode.PIECEWISE, CUDAGraphMode.PIECEWISE),
        (CUDAGraphMode.FULL, CUDAGraphMode.FULL, CUDAGraphMode.FULL),
        (CUDAGraphMode.FULL_DECODE_ONLY, CUDAGraphMode.FULL, CUDAGraphMode.NONE),
        (CUDAGraphMode.FULL_AND_PIECEWISE, CUDAGraphMode.FULL, CUDAGraphMode.PIECEWISE),
    ],
)
def test_dispatch_per_mode(mode: CUDAGraphMode, decode: CUDAGraphMode, mixed: CUDAGraphMode) -> None:
    d = CudagraphDispatcher(mode, [1, 2, 4, 8], max_num_seqs=8)
    assert d.dispatch(3, uniform_decode=True)[0] == decode
    assert d.dispatch(3, uniform_decode=False)[0] == mixed
    assert d.dispatch(9, uniform_decode=True)[0] == CUDAGraphMode.NONE


# ---------------------------------------------------------------------- mode resolution


def test_cpu_resolves_every_mode_to_none_with_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    for mode in CUDAGraphMode:
        cfg = CompilationConfig(cudagraph_mode=mode)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="compiler.cudagraph_dispatcher"):
            assert resolve_cudagraph_mode(cfg, "cpu") == CUDAGraphMode.NONE
        lines = [r for r in caplog.records if r.name == "compiler.cudagraph_dispatcher"]
        assert len(lines) == (0 if mode == CUDAGraphMode.NONE else 1)
        if lines:
            assert "resolves to NONE on cpu" in lines[0].getMessage()


def test_gpu_default_is_full_and_piecewise() -> None:
    cfg = CompilationConfig()
    assert cfg.cudagraph_mode is None  # unset: resolved per device
    assert resolve_cudagraph_mode(cfg, "cuda") == CUDAGraphMode.FULL_AND_PIECEWISE
    assert resolve_cudagraph_mode(cfg, "cpu") == CUDAGraphMode.NONE


def test_full_only_where_attention_allows() -> None:
    full = CompilationConfig(cudagraph_mode=CUDAGraphMode.FULL)
    assert resolve_cudagraph_mode(full, "cuda", AttentionCGSupport.ALWAYS) == CUDAGraphMode.FULL
    assert (
        resolve_cudagraph_mode(full, "cuda", AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE)
        == CUDAGraphMode.FULL_AND_PIECEWISE
    )
    assert resolve_cudagraph_mode(full, "cuda", AttentionCGSupport.NEVER) == CUDAGraphMode.PIECEWISE
    nosplit = CompilationConfig(cudagraph_mode=CUDAGraphMode.FULL, splitting_ops=[])
    assert (
        resolve_cudagraph_mode(nosplit, "cuda", AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE)
        == CUDAGraphMode.FULL_DECODE_ONLY
    )
    assert resolve_cudagraph_mode(nosplit, "cuda", AttentionCGSupport.NEVER) == CUDAGraphMode.NONE
    fdo = CompilationConfig(cudagraph_mode=CUDAGraphMode.FULL_DECODE_ONLY)
    assert (
        resolve_cudagraph_mode(fdo, "cuda", AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE)
        == CUDAGraphMode.FULL_DECODE_ONLY
    )
    # no compilation: full graphs of the eager model only
    eager = CompilationConfig(mode=CompilationMode.NONE)
    assert resolve_cudagraph_mode(eager, "cuda") == CUDAGraphMode.FULL_DECODE_ONLY
    from compiler.ops.static_attention import ATTENTION_CG_SUPPORT

    assert ATTENTION_CG_SUPPORT == AttentionCGSupport.ALWAYS


# ---------------------------------------------------------------------- config validation


@pytest.mark.parametrize(
    "data,message",
    [
        ({"cudagraph_mode": "SOMETIMES"}, "cudagraph_mode must be one of"),
        ({"cudagraph_capture_sizes": [0, 2]}, "positive integers"),
        ({"cudagraph_capture_sizes": "8"}, "positive integers"),
        ({"cudagraph_capture_sizes": [1, 2], "max_cudagraph_capture_size": 8}, "must equal the largest"),
        ({"max_cudagraph_capture_size": -1}, "non-negative integer"),
        ({"max_cudagraph_capture_size": True}, "non-negative integer"),
        ({"cudagraph_mode": "PIECEWISE", "splitting_ops": []}, "needs splitting_ops"),
        ({"cudagraph_mode": "FULL_AND_PIECEWISE", "mode": 1}, "needs mode=3"),
        ({"compile_sizes": [0]}, "compile_sizes entries"),
        ({"compile_sizes": ["all"]}, "compile_sizes entries"),
    ],
)
def test_config_errors_are_one_line(data: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        CompilationConfig.from_dict(data)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_cudagraph_mode_spellings_and_hash() -> None:
    a = CompilationConfig.from_cli(None, ["cudagraph_mode=full_and_piecewise"])
    assert a.cudagraph_mode == CUDAGraphMode.FULL_AND_PIECEWISE
    assert (
        CompilationConfig.from_json(json.dumps({"cudagraph_mode": "FULL_DECODE_ONLY"})).cudagraph_mode
        == CUDAGraphMode.FULL_DECODE_ONLY
    )
    assert a.compute_hash() != CompilationConfig().compute_hash()
    assert CompilationConfig(cudagraph_capture_sizes=[1, 2]).compute_hash() != CompilationConfig().compute_hash()


# ---------------------------------------------------------------------- weak references


def test_weak_ref_tensor_aliases_memory() -> None:
    from compiler.cuda_graph import weak_ref_tensors

    t = torch.arange(12.0).view(3, 4)[1:]
    (w,) = weak_ref_tensors((t,))
    assert w.data_ptr() == t.data_ptr() and w.shape == t.shape and w.stride() == t.stride()
    t.add_(1)
    assert torch.equal(w, t)


# ---------------------------------------------------------------------- attention under padding (emulated graphs)


def _script(runner) -> list[torch.Tensor]:  # noqa: ANN001
    """Prefill (mixed lengths), uniform decodes of 3, 2, 1 sequences, then a mixed prefill+decode batch."""
    a = runner.add_sequence(list(range(1, 6)))
    b = runner.add_sequence(list(range(10, 13)))
    c = runner.add_sequence([7])
    outs = [runner.step([a, b, c]).logits]  # 9 tokens -> padded to 16
    for i, group in enumerate([[a, b, c], [a, b], [c], [a, b, c]]):
        for s in group:
            s.tokens.append(3 + i)
        outs.append(runner.step(group).logits)  # uniform decode: 3 -> 4, 2, 1, 3 -> 4
    d = runner.add_sequence([9, 8, 7])
    a.tokens += [1, 2]
    outs.append(runner.step([a, d]).logits)  # mixed 5 tokens -> 8
    return outs


@pytest.mark.parametrize(
    "mode",
    [CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL, CUDAGraphMode.FULL_DECODE_ONLY, CUDAGraphMode.FULL_AND_PIECEWISE],
)
def test_padded_batches_equal_unpadded_on_cpu(mode: CUDAGraphMode) -> None:
    """The graph path's dispatch, padding and graph-safe attention, emulated without capture on the CPU: the
    logits of every prefill and decode step equal those of the plain runner (mode 0: no compile, fast)."""
    from compiler.cudagraph_runner import GraphExecutor
    from compiler.runner import ModelRunner

    cfg = {"mode": 0}
    ref = ModelRunner("tiny", "cpu", CompilationConfig.from_dict(cfg), max_num_batched_tokens=16)
    assert not ref.graphs.enabled  # the CPU resolves to NONE
    base = _script(ref)
    runner = ModelRunner("tiny", "cpu", CompilationConfig.from_dict(cfg), max_num_batched_tokens=16)
    runner.graphs = GraphExecutor(runner, mode=mode, emulate=True)
    runner.warmup()
    assert runner.graphs.captured and runner.graphs.capture_sizes == [1, 2, 4, 8, 16]
    seen = []
    orig = runner.graphs.execute

    def execute(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        out = orig(*args, **kwargs)
        m, d = runner.graphs.last_dispatch
        seen.append((m, d.num_tokens if d else None))
        return out

    runner.graphs.execute = execute
    outs = _script(runner)
    for x, y in zip(outs, base):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)
    full, pw, none = CUDAGraphMode.FULL, CUDAGraphMode.PIECEWISE, CUDAGraphMode.NONE
    decode = [(full, 4), (full, 2), (full, 1), (full, 4)] if mode != pw else [(pw, 4), (pw, 2), (pw, 1), (pw, 4)]
    mixed = {
        pw: [(pw, 16), (pw, 8)],
        full: [(full, 16), (full, 8)],
        CUDAGraphMode.FULL_DECODE_ONLY: [(none, None)] * 2,
        CUDAGraphMode.FULL_AND_PIECEWISE: [(pw, 16), (pw, 8)],
    }[mode]
    assert seen == [mixed[0], *decode, mixed[1]]


def test_larger_batches_run_without_graphs_on_cpu() -> None:
    from compiler.cudagraph_runner import GraphExecutor
    from compiler.runner import ModelRunner

    runner = ModelRunner(
        "tiny",
        "cpu",
        CompilationConfig.from_dict({"mode": 0, "cudagraph_capture_sizes": [1, 2, 4]}),
        max_num_batched_tokens=16,
    )
    runner.graphs = GraphExecutor(runner, mode=CUDAGraphMode.FULL_AND_PIECEWISE, emulate=True)
    runner.warmup()
    seq = runner.add_sequence(list(range(1, 10)))
    runner.step([seq])
    assert runner.graphs.last_dispatch == (CUDAGraphMode.NONE, None)


def test_graph_executor_refuses_cpu_without_emulation() -> None:
    from compiler.cudagraph_runner import GraphExecutor
    from compiler.runner import ModelRunner

    runner = ModelRunner("tiny", "cpu", CompilationConfig.from_dict({"mode": 0, "cudagraph_mode": "FULL"}))
    assert not runner.graphs.enabled and runner.graphs.mode == CUDAGraphMode.NONE
    with pytest.raises(ValueError, match="need a CUDA device"):
        GraphExecutor(runner, mode=CUDAGraphMode.FULL)


# ---------------------------------------------------------------------- autotune counting


def test_autotune_counter_counts_real_calls_and_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    """The counter wraps the methods that really benchmark (a cache hit replays Inductor's own counter deltas,
    so that counter cannot tell a hot start from a cold one)."""
    import torch._inductor.select_algorithm as sa

    from compiler.autotune import AutotuneCounter, size_config_patches

    class Selector:
        def benchmark(self, x: int) -> int:
            return x + 1

    raw = Selector.__dict__["benchmark"]
    monkeypatch.setattr(sa, "AlgorithmSelectorCache", Selector)
    with AutotuneCounter() as c:
        assert Selector().benchmark(1) == 2 and Selector().benchmark(2) == 3
    assert c.gemm_autotune == 2 and c.total == 2
    assert Selector.__dict__["benchmark"] is raw
    with AutotuneCounter() as c2:
        pass
    assert c2.total == 0
    # max-autotune for per-size compiles on CUDA only; plain Inductor on the CPU
    assert size_config_patches([torch.zeros(2)]) == {}
    assert size_config_patches([torch.empty(2, device="meta")]) == {}
