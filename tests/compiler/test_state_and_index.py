"""Issue 13 items 6, 7 and 10 on the compiler side: a failed first call leaves no half-built state; a factor that
cannot be computed is a logged sentinel; concurrent index writes merge; traced files outside import roots keep
distinct ids."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import nn

from compiler import cache_key, torch_compat
from compiler.artifacts import CompileIndex, IndexEntry
from compiler.capture import support_torch_compile
from compiler.compile_context import CompileContext
from compiler.config import CompilationConfig


@support_torch_compile(dynamic_arg_dims={"x": 0})
class Rows(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(3, -1).sum(1)  # a size not divisible by 3 fails while tracing


def test_a_failed_first_call_leaves_no_half_built_state() -> None:
    m = Rows()
    m.enable_compile(CompileContext(CompilationConfig(mode=2)))
    try:
        m(torch.ones(4))
    except Exception:
        pass
    assert m.compile_state.compiled_fn is None and m.compile_state.backend is None
    for n in (6, 9, 12):  # the retry marks the dim dynamic again: every size runs the one graph correctly
        x = torch.arange(float(n))
        torch.testing.assert_close(m(x), x.view(3, -1).sum(1))


def test_a_factor_that_cannot_be_computed_is_a_logged_sentinel(monkeypatch, caplog) -> None:
    def broken() -> str:
        raise RuntimeError("no build key here")

    monkeypatch.setattr(torch_compat, "compute_torch_key", broken)
    cache_key._torch_key.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="compiler.cache_key"):
            value = cache_key.local_compiler_factors("cpu")["torch_key"]
    finally:
        cache_key._torch_key.cache_clear()
    assert value.startswith("<unknown: torch_key") and value != torch.__version__
    assert any("torch_key could not be computed" in r.getMessage() for r in caplog.records)


def test_concurrent_index_writers_keep_both_entries(tmp_path: Path) -> None:
    path = tmp_path / "compile_index.json"
    a, b = CompileIndex.open(path, "k"), CompileIndex.open(path, "k")  # two warms read the same (empty) index
    a.record(0, None, IndexEntry("g0", "general", "artifact_a", "binary", "1" * 64))
    b.record(1, None, IndexEntry("g1", "general", "artifact_b", "binary", "2" * 64))
    a.save()
    b.save()
    merged = CompileIndex.open(path, "k")
    assert set(merged.pieces) == {"0", "1"}
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".tmp"]


def test_traced_files_outside_import_roots_keep_distinct_ids(tmp_path: Path) -> None:
    one, two = tmp_path / "a" / "model.py", tmp_path / "b" / "model.py"
    for p in (one, two):
        p.parent.mkdir()
        p.write_text("x = 1\n")
    assert cache_key.file_id(str(one)) != cache_key.file_id(str(two))
    assert cache_key.file_id(str(one)) == f"file:{one.resolve()}"
