"""``share_rank_folders`` on hand-made rank folders (no compile): what it may share, and what it must leave alone.

The CUDA cases run on the CPU: they only read the compiler factors the rank folders record. Whether a rank really
runs rank 0's code on its own GPU needs two GPUs (see docs/tensor_parallel.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compiler.distributed.rank_share import share_rank_folders

INDEX = {
    "schema": 1,
    "cache_key": "h",
    "pieces": {"0": {"graph_hash": "g0", "shape": "general", "artifact": "artifact_0", "format": "binary"}},
}


def _rank(hash_dir: Path, name: str, compiler: dict | None, artifact: bytes) -> Path:
    d = hash_dir / name / "backbone"
    d.mkdir(parents=True)
    (d / "compile_index.json").write_text(json.dumps(INDEX))
    if compiler is not None:
        (d / "cache_key_factors.json").write_text(
            json.dumps({"schema": 1, "hash": "h", "factors": {"compiler": {"hash": "x", "values": compiler}}})
        )
    (d / "artifact_0").write_bytes(artifact)
    return d


CPU = {"device_type": "cpu", "device": "cpu-x86_64", "torch": "2.13.0+cpu"}
CUDA = {"device_type": "cuda", "device": "NVIDIA H200", "capability": "9.0", "torch": "2.11.0+cu130"}


@pytest.mark.parametrize(
    "rank0,rank1,index_free,shared",
    [
        (CPU, CPU, False, True),
        (CUDA, CUDA, False, False),  # rank 1's code would name cuda:0: left alone
        (CUDA, CUDA, True, True),  # every rank compiled for cuda:0 (CUDA_VISIBLE_DEVICES per rank)
        (CUDA, dict(CUDA, device="NVIDIA H100"), True, False),  # another GPU model
        (CPU, None, False, False),  # no factors: nothing proves it is the same code
    ],
)
def test_what_is_shared(tmp_path, rank0, rank1, index_free, shared):
    h = tmp_path / "h"
    src = _rank(h, "rank_0_0", rank0, b"code compiled by rank 0 (device index 0)")
    dest = _rank(h, "rank_1_0", rank1, b"code compiled by rank 1 (device index 1)")
    report = share_rank_folders(h, device_index_free=index_free)
    assert report["rank_0_0"] == "source"
    if shared:
        assert report["rank_1_0"] == "shared"
        assert (dest / "artifact_0").read_bytes() == (src / "artifact_0").read_bytes()
    else:
        assert report["rank_1_0"].startswith("left alone: "), report
        assert (dest / "artifact_0").read_bytes() == b"code compiled by rank 1 (device index 1)"


def test_cuda_reason_names_the_device_index(tmp_path):
    h = tmp_path / "h"
    _rank(h, "rank_0_0", CUDA, b"a")
    _rank(h, "rank_1_0", CUDA, b"b")
    assert "device index" in share_rank_folders(h)["rank_1_0"]
