"""Where vLLM loads a compiled piece from (cachetool/engines/vllm/piece_paths.py): vLLM 0.26 reads each piece at the
absolute path the warm saved it at, so a root pulled to another path compiles again where that path is gone; an
install says so in one line, naming the path to pull into. Roots here are written as vLLM writes them (its
``vllm_compile_cache.py`` literal)."""

from __future__ import annotations

import logging
import pprint
from pathlib import Path

import pytest

from cachetool.engines.vllm import install_facts, piece_paths, releases
from cachetool.engines.vllm.layout import settle_installed

KEY = "artifact_compile_range_1_2048_subgraph_0"


def write_root(root: Path, saved_under: Path, compiler: str = "inductor_standalone") -> Path:
    """A piecewise folder whose pieces were saved under ``saved_under`` (vLLM's handle: key, absolute path)."""
    folder = root / "torch_compile_cache" / "ad1a243e10" / "rank_0_0" / "backbone"
    folder.mkdir(parents=True)
    saved = saved_under / "torch_compile_cache" / "ad1a243e10" / "rank_0_0" / "backbone" / KEY
    entries = {((1, 2048), 0, compiler): {"graph_handle": (KEY, str(saved)), "cache_key": "k0"}}
    (folder / "vllm_compile_cache.py").write_text(pprint.PrettyPrinter(indent=4).pformat(entries))
    (folder / KEY).write_bytes(b"artifact")
    return root


def test_a_0_26_root_at_another_path_is_named_not_relocatable_with_the_path_to_pull_into(tmp_path):
    warm = tmp_path / "vllm-cache"
    root = write_root(tmp_path / "elsewhere", saved_under=warm)

    line = piece_paths.note(root, "0.26.0")

    assert line is not None and "\n" not in line
    assert "not relocatable" in line and line.endswith(f"pull into {warm}")
    assert piece_paths.saved_at(root) == {"torch_compile_cache/ad1a243e10/rank_0_0/backbone": str(warm)}


def test_a_root_at_the_warms_path_is_no_news(tmp_path):
    root = tmp_path / "vllm-cache"
    write_root(root, saved_under=root)
    assert piece_paths.saved_at(root) == {}
    assert piece_paths.note(root, "0.26.0") is None


def test_a_root_reached_through_a_link_to_the_warms_path_is_no_news(tmp_path):
    warm = write_root(tmp_path / "vllm-cache", saved_under=tmp_path / "vllm-cache")
    (tmp_path / "link").symlink_to(warm, target_is_directory=True)
    assert piece_paths.saved_at(tmp_path / "link") == {}


def test_the_older_inductor_adaptor_loads_by_hash_and_is_not_bound_to_a_path(tmp_path):
    root = write_root(tmp_path / "elsewhere", saved_under=tmp_path / "vllm-cache", compiler="inductor")
    assert piece_paths.saved_at(root) == {}
    assert piece_paths.note(root, "0.26.0") is None


@pytest.mark.parametrize("version", ["0.28.0", "0.32.0", "0.27.1", "0.25.0", None])
def test_a_release_that_joins_the_key_or_one_not_read_says_nothing(tmp_path, version):
    root = write_root(tmp_path / "elsewhere", saved_under=tmp_path / "vllm-cache")
    assert piece_paths.note(root, version) is None


def test_which_releases_load_by_the_saved_path():
    assert releases.loads_pieces_by_saved_path("0.26.0") is True
    assert releases.loads_pieces_by_saved_path("0.26.1+cu130") is True
    assert releases.loads_pieces_by_saved_path("0.28.0") is False
    assert releases.loads_pieces_by_saved_path("0.32.0.dev1+cpu") is False
    assert releases.loads_pieces_by_saved_path("0.27.0") is None  # not read
    assert releases.loads_pieces_by_saved_path("0.25.1") is None
    assert releases.loads_pieces_by_saved_path("nightly") is None


def test_a_cache_file_that_is_not_vllms_literal_is_skipped(tmp_path):
    root = write_root(tmp_path / "elsewhere", saved_under=tmp_path / "vllm-cache")
    next(root.rglob("vllm_compile_cache.py")).write_text("import os  # not a literal")
    assert piece_paths.saved_at(root) == {}


def test_an_install_settles_the_root_and_says_it_in_one_line(tmp_path, monkeypatch, caplog):
    warm = tmp_path / "vllm-cache"
    root = write_root(tmp_path / "elsewhere", saved_under=warm)
    monkeypatch.setattr(install_facts, "vllm_version", lambda: "0.26.0")

    with caplog.at_level(logging.WARNING, logger="cachetool.install"):
        settle_installed(root)

    lines = [r.getMessage() for r in caplog.records if r.name == "cachetool.install"]
    assert len(lines) == 1 and f"pull into {warm}" in lines[0]
