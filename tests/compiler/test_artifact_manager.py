"""Issue 22 item 3: one artifact manager (compiler/artifact_manager.py) owns the index, the digest check and
load-or-compile, for the Dynamo path and the AOT entry's loader alike.

Real Inductor compiles on the CPU with the tiny model (5 pieces, 3 distinct) and a compile size, in this process:
one cold warm into a fresh root (module fixture), then starts on copies of that root. A spy adaptor (the one
``piecewise_backend`` builds) records every compile and load that reaches Inductor."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
import torch

from compiler import piecewise_backend
from compiler.aot_entry import ENTRY_FILE, AotEntryError, ArtifactRef
from compiler.artifact_manager import ArtifactManager, Piece
from compiler.compiler_interface import InductorStandaloneAdaptor
from compiler.config import CompilationConfig
from compiler.counters import CompileInStrictMode, counters, strict_mode
from compiler.layout import CacheLayout
from compiler.runner import ModelRunner

pytestmark = pytest.mark.slow

SIZE = 2  # one compile size: its pieces go through the manager too (the index's "i@2" entries)


class SpyAdaptor(InductorStandaloneAdaptor):
    """Inductor's adaptor, recording ``("compile", graph hash, shape)`` and ``("load", artifact, shape)``."""

    calls: list[tuple[str, str, int | None]] = []

    def compile(self, graph, example_inputs, runtime_shape, key, directory, save_format):  # noqa: ANN001
        SpyAdaptor.calls.append(("compile", key, runtime_shape))
        return super().compile(graph, example_inputs, runtime_shape, key, directory, save_format)

    def load(self, handle, graph, example_inputs, runtime_shape, directory, save_format):  # noqa: ANN001
        SpyAdaptor.calls.append(("load", handle[1], runtime_shape))
        return super().load(handle, graph, example_inputs, runtime_shape, directory, save_format)


def _start(root: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ModelRunner, list, object]:
    """A start on ``root`` with the spy adaptor; returns (runner, the adaptor's calls, the counters' change)."""
    monkeypatch.setattr(piecewise_backend, "InductorStandaloneAdaptor", SpyAdaptor)
    SpyAdaptor.calls = []
    before = counters.snapshot()
    runner = ModelRunner(
        "tiny", "cpu", CompilationConfig(cache_dir=str(root), compile_sizes=[SIZE]), max_num_batched_tokens=8
    )
    runner.warmup()
    return runner, list(SpyAdaptor.calls), counters.delta(before)


@pytest.fixture(scope="module")
def cold(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    root = tmp_path_factory.mktemp("artifact_manager") / "root"
    with pytest.MonkeyPatch.context() as mp:
        runner, calls, done = _start(root, mp)
    assert runner.compile_state.hot_path == "dynamo" and (runner.backend.layout.dir / ENTRY_FILE).is_file()
    return root, runner, calls, done


def _copy(cold, dest: Path) -> tuple[Path, CacheLayout]:
    root, runner, _, _ = cold
    shutil.copytree(root, dest, symlinks=True)
    layout = runner.backend.layout
    return dest, CacheLayout(dest, layout.hash10, layout.rank, layout.dp_rank, layout.prefix)


def _general_hashes(runner: ModelRunner) -> list[str]:
    infos = sorted(runner.backend.pieces_info.values(), key=lambda i: i.index)
    return [i.graph_hash for i in infos]


def test_identical_pieces_are_compiled_once(cold) -> None:
    _, runner, calls, done = cold
    hashes = _general_hashes(runner)
    assert len(hashes) == 5 and len(set(hashes)) == 3  # the tiny model's middle pieces are identical
    compiles = [(key, shape) for kind, key, shape in calls if kind == "compile"]
    assert sorted(compiles) == sorted({(h, None) for h in hashes} | {(h + f"@{SIZE}", SIZE) for h in hashes})
    assert done.graphs_compiled == 6 and done.graphs_loaded == 0 and done.graphs_reused == 4  # 2 general + 2 sized
    manager = runner.backend.artifacts
    assert isinstance(manager, ArtifactManager) and manager.unique_pieces == 3
    # Identical pieces share one saved artifact, which the index records for each of them.
    refs = [manager.lookup(h, None) for h in hashes]
    assert all(isinstance(r, ArtifactRef) for r in refs) and len({r.name for r in refs}) == 3
    for i, h in enumerate(hashes):
        assert ArtifactRef.of(manager.recorded(i, None)) == refs[i]
        assert manager.recorded(i, SIZE).graph_hash == h + f"@{SIZE}"


def test_the_aot_loader_and_the_dynamo_path_go_through_the_same_manager(
    cold, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, warm, _, _ = cold
    hashes = _general_hashes(warm)
    root, _ = _copy(cold, tmp_path / "aot")
    hot, calls, done = _start(root, monkeypatch)
    backend = hot.backend
    assert hot.compile_state.hot_path == "aot" and isinstance(backend, piecewise_backend.HotStartBackend)
    assert isinstance(backend.artifacts, ArtifactManager)
    # The refs the warm's entry recorded (through the warm's manager) are what the loader's manager loaded.
    assert [backend.artifacts.lookup(h, None) for h in hashes] == [
        warm.backend.artifacts.lookup(h, None) for h in hashes
    ]
    loads = [(name, shape) for kind, name, shape in calls if kind == "load"]
    assert not [c for c in calls if c[0] == "compile"] and len(loads) == len(set(loads)) == 6  # each artifact once
    assert backend.artifacts.tally.loaded == backend.graphs_loaded == 6 and backend.artifacts.tally.reused == 2
    assert done.graphs_loaded == 6 and done.graphs_reused == 2 and done.unique_pieces == 3

    dynamo_root, _ = _copy(cold, tmp_path / "dynamo")
    next(dynamo_root.rglob(ENTRY_FILE)).unlink()  # no entry: the Dynamo path serves the start
    traced, traced_calls, traced_done = _start(dynamo_root, monkeypatch)
    assert traced.compile_state.hot_path == "dynamo" and traced_done.graphs_compiled == 0
    assert isinstance(traced.backend.artifacts, ArtifactManager)
    assert sorted(c for c in traced_calls if c[0] == "load") == sorted(c for c in calls if c[0] == "load")
    assert [traced.backend.artifacts.lookup(h, None) for h in hashes] == [
        backend.artifacts.lookup(h, None) for h in hashes
    ]
    assert hot.run_workload().checksum == traced.run_workload().checksum == warm.run_workload().checksum


def test_a_corrupted_artifact_is_refused_by_the_manager(cold, tmp_path: Path, caplog) -> None:
    _, runner, _, _ = cold
    root, layout = _copy(cold, tmp_path / "root")
    manager = ArtifactManager(SpyAdaptor(), device="cpu", save_format="binary")
    manager.open(layout, layout.hash10)
    entry = manager.recorded(0, None)
    (layout.dir / entry.artifact).write_bytes((layout.dir / entry.artifact).read_bytes() + b"x")
    SpyAdaptor.calls = []
    loaded_before = counters.graphs_loaded

    # The AOT loader's policy: refused, and the refusal raises.
    with pytest.raises(AotEntryError, match="does not match its recorded digest"):
        manager.load(ArtifactRef.of(entry), Piece(0, entry.graph_hash))
    # The Dynamo path's policy: refused, logged, then compiled instead (which strict mode refuses here).
    with (
        caplog.at_level(logging.WARNING, logger="compiler.artifact_manager"),
        strict_mode(True),
        pytest.raises(CompileInStrictMode, match="piece 0"),
    ):
        manager.load_or_compile(Piece(0, entry.graph_hash, None, 5), None, [])  # type: ignore[arg-type]
    assert (
        f"Could not load {entry.artifact} (AotEntryError: artifact {entry.artifact} does not match its "
        "recorded digest); compiling instead" in caplog.text
    )
    assert SpyAdaptor.calls == [] and manager.tally.loaded == 0 and counters.graphs_loaded == loaded_before

    # An intact artifact serving two identical pieces loads once; the second piece gets the same callable.
    hashes = _general_hashes(runner)
    twin = next(i for i in range(1, 5) if hashes.index(hashes[i]) != i)
    first = hashes.index(hashes[twin])
    ref = ArtifactRef.of(manager.recorded(first, None))
    fn = manager.load(ref, Piece(first, hashes[first]))
    assert manager.load(ref, Piece(twin, hashes[twin])) is fn and callable(fn)
    assert SpyAdaptor.calls == [("load", ref.name, None)]
    assert manager.tally.loaded == 1 and manager.tally.reused == 1


def test_a_start_on_a_corrupted_artifact_falls_back_and_compiles_that_piece(
    cold, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both callers refuse it through the one check: the AOT loader (the start then traces), then the Dynamo
    path, which compiles the altered piece alone and loads the rest."""
    root, layout = _copy(cold, tmp_path / "root")
    entry = ArtifactManager(SpyAdaptor(), device="cpu", save_format="binary")
    entry.open(layout, layout.hash10)
    bad = entry.recorded(0, None)
    (layout.dir / bad.artifact).write_bytes((layout.dir / bad.artifact).read_bytes() + b"x")
    runner, calls, done = _start(root, monkeypatch)
    state = runner.compile_state
    assert state.hot_path == "dynamo" and "does not match its recorded digest" in state.aot_fallback_reason
    assert [c for c in calls if c[0] == "compile"] == [("compile", bad.graph_hash, None)]
    assert done.graphs_compiled == 1 and done.graphs_loaded == 5  # 2 general + 3 sized loaded, 0 refused
    out = runner.step([runner.add_sequence([1, 2, 3])]).logits
    assert torch.isfinite(out).all()
