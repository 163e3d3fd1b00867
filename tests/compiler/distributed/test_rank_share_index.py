"""``share_rank_folders`` reads each rank's index through ``compiler.artifacts.CompileIndex`` and its factors
through ``compiler.cache_key.CacheKey.read``: a rank whose index is missing, unreadable or records other pieces is
left alone (no compile: hand-made folders, as in test_rank_share.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compiler.artifacts import CompileIndex, IndexEntry
from compiler.cache_key import CacheKey
from compiler.distributed.rank_share import share_rank_folders

CPU = {"device_type": "cpu", "device": "cpu-x86_64", "torch": "2.13.0+cpu"}


def _rank(hash_dir: Path, name: str, graph_hash: str = "g0") -> Path:
    """A rank folder written by the writers the pipeline uses (CompileIndex.save, CacheKey.write)."""
    d = hash_dir / name / "backbone"
    d.mkdir(parents=True)
    (d / "artifact_0").write_bytes(f"{name}'s artifact".encode())
    index = CompileIndex.open(d / "compile_index.json", hash_dir.name)
    index.record(0, None, IndexEntry(graph_hash, "general", "artifact_0", "binary", "sha"))
    index.save()
    CacheKey(hash=hash_dir.name, factors={"compiler": {"hash": "x", "values": CPU}}).write(d)
    return d


def test_written_by_the_pipeline_writers_is_shared(tmp_path):
    h = tmp_path / "h"
    src, dest = _rank(h, "rank_0_0"), _rank(h, "rank_1_0")
    assert share_rank_folders(h)["rank_1_0"] == "shared"
    assert (dest / "artifact_0").read_bytes() == (src / "artifact_0").read_bytes()


@pytest.mark.parametrize(
    "damage,reason",
    [
        (lambda p: p.unlink(), "no readable compile_index.json"),
        (lambda p: p.write_text("{not json"), "no readable compile_index.json"),
        (
            lambda p: p.write_text(json.dumps({"schema": 1, "pieces": {"0": {"shape": "general"}}})),
            "no readable compile_index.json",
        ),
        (
            lambda p: p.write_text(
                json.dumps(
                    {
                        "schema": 1,
                        "cache_key": "h",
                        "pieces": {
                            "0": {
                                "graph_hash": "other",
                                "shape": "general",
                                "artifact": "artifact_0",
                                "format": "binary",
                            }
                        },
                    }
                )
            ),
            "pieces differ",
        ),
    ],
)
def test_unreadable_or_other_index_is_left_alone(tmp_path, damage, reason):
    h = tmp_path / "h"
    _rank(h, "rank_0_0")
    dest = _rank(h, "rank_1_0")
    damage(dest / "compile_index.json")
    outcome = share_rank_folders(h)["rank_1_0"]
    assert outcome.startswith("left alone: ") and reason in outcome, outcome
    assert (dest / "artifact_0").read_bytes() == b"rank_1_0's artifact"


def test_unreadable_factors_are_left_alone(tmp_path):
    h = tmp_path / "h"
    _rank(h, "rank_0_0")
    dest = _rank(h, "rank_1_0")
    (dest / "cache_key_factors.json").write_text("[]")
    assert "no readable compiler factors" in share_rank_folders(h)["rank_1_0"]
