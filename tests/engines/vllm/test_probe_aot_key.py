"""The key folder a worker's report names is the one vLLM used: the folder it saved to, else the one it tried to load
from (watched in vLLM's own decorator), and only else vLLM's key function computed again after the start, which an
FP8 MoE model's config (changed after vLLM hashed it) does not repeat: on the H100 a check named 839748fb... while
vLLM had loaded 1bb29a02..., a false miss on a root the server hit."""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

import pytest

import cachetool.engines.vllm.child.in_vllm as in_vllm

pytest.importorskip("vllm")

LOADED = "1bb29a0207c0a98d22221a3fdeb6a5c5fbfe7827cbca773a9fe367046fabbcd9"
RECOMPUTED = "839748fbdb3b045c0000000000000000000000000000000000000000000000ff"


@pytest.fixture(scope="module")
def probe():
    """cachetool_vllm_probe as vLLM's workers import it (by file, under its own name); vLLM's loader is put back
    afterwards."""
    from vllm.compilation import decorators

    before = decorators._try_load_aot_compiled_fn
    path = Path(in_vllm.__file__).with_name("cachetool_vllm_probe.py")
    spec = importlib.util.spec_from_file_location("cachetool_vllm_probe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    decorators._try_load_aot_compiled_fn = before


def compiled_module(saved_in: str | None = None, loaded: bool = True):
    parallel = types.SimpleNamespace(rank=0, data_parallel_index=0)
    return types.SimpleNamespace(
        vllm_config=types.SimpleNamespace(parallel_config=parallel),
        _aot_cache_dir=saved_in,
        was_aot_compile_fn_loaded_from_disk=loaded,
    )


def test_the_reported_key_is_the_folder_vllm_loaded_from_not_a_recomputation(probe, monkeypatch, tmp_path):
    monkeypatch.setattr(probe, "vllm_aot_key", lambda module: RECOMPUTED)
    module = compiled_module()
    tried = tmp_path / "torch_compile_cache" / "torch_aot_compile" / LOADED / "rank_0_0" / "model"
    setattr(module, probe.AOT_TRIED, {"path": str(tried), "loaded": True})
    report = probe.aot_report(module)
    assert report["key"] == LOADED
    assert report["computed_key"] == RECOMPUTED  # kept beside it: what vLLM's key function says now
    assert report["path"].endswith(f"torch_aot_compile/{LOADED}/rank_0_0/model")


def test_a_folder_this_process_saved_to_wins_over_a_load_it_tried_first(probe, monkeypatch, tmp_path):
    monkeypatch.setattr(probe, "vllm_aot_key", lambda module: RECOMPUTED)
    saved = tmp_path / "torch_aot_compile" / ("a" * 8) / "rank_0_0"
    module = compiled_module(saved_in=str(saved), loaded=False)
    setattr(module, probe.AOT_TRIED, {"path": f"/x/{LOADED}/rank_0_0/model", "loaded": False})
    assert probe.aot_report(module)["key"] == "a" * 8


def test_without_a_load_or_a_save_the_key_is_vllms_key_function(probe, monkeypatch):
    monkeypatch.setattr(probe, "vllm_aot_key", lambda module: RECOMPUTED)
    assert probe.aot_report(compiled_module(loaded=False))["key"] == RECOMPUTED


def test_vllms_decorator_load_is_watched_and_a_failed_load_recorded_as_not_loaded(probe, tmp_path):
    from vllm.compilation import decorators

    watched = decorators._try_load_aot_compiled_fn
    assert getattr(watched, "cachetool_watched", False)
    probe.watch_aot_loads()  # a second import in the same process does not wrap it twice
    assert decorators._try_load_aot_compiled_fn is watched
    model = types.SimpleNamespace()  # no config: vLLM's own loader fails and returns None, as for a missing file
    missing = tmp_path / LOADED / "rank_0_0" / "model"
    assert watched(model, str(missing)) is None
    assert getattr(model, probe.AOT_TRIED) == {"path": str(missing), "loaded": False}
