"""Triton's group files name a kernel's files by absolute path, and Triton takes a kernel from its cache only where
every named file exists. An install writes them for the folder they land in
(:mod:`cachetool.layouts.triton_groups`), so that a Triton cache packed at one path hits at another once the first
is gone: the fresh pod. Triton's own cache manager is the judge."""

from __future__ import annotations

import json
import shutil

import pytest

from cachetool.bundle.packing import pack
from cachetool.install import InstallOptions, install_bundle
from cachetool.layouts import triton_groups
from tests.cache_trees import make_triton_tree, make_vllm_tree, tree_snapshot

KEY = "KERNELHASH0"
FILES = {"triton_poi_fused_0.ttir": "module {}", "triton_poi_fused_0.cubin": b"CUBIN" * 10}


def triton_cache(folder, monkeypatch):
    """One kernel written into ``folder`` as ``triton.compile`` writes it: its files, its metadata, its group."""
    pytest.importorskip("triton")
    from triton.runtime.cache import FileCacheManager

    monkeypatch.setenv("TRITON_CACHE_DIR", str(folder))
    manager = FileCacheManager(KEY)
    group = {name: manager.put(data, name) for name, data in FILES.items()}
    meta = {"name": "triton_poi_fused_0", "target": {"backend": "cuda", "arch": 90, "warp_size": 32}}
    group["triton_poi_fused_0.json"] = manager.put(json.dumps(meta), "triton_poi_fused_0.json")
    manager.put_group("triton_poi_fused_0.json", group)
    return folder


def found_by_triton(folder, monkeypatch):
    """What Triton's cache manager finds of the kernel in ``folder`` (None: a miss, the kernel compiled again)."""
    from triton.runtime.cache import FileCacheManager

    monkeypatch.setenv("TRITON_CACHE_DIR", str(folder))
    return FileCacheManager(KEY).get_group("triton_poi_fused_0.json")


def moved(src, dst, keys):
    """``src`` packed, removed (a fresh pod has no warm's root), and installed at ``dst``."""
    with pack(src, sign_key=keys["priv"]) as packed:
        shutil.rmtree(src)
        return install_bundle(packed, dst, InstallOptions(trust=[keys["pub"]], preflight=False))


def test_a_triton_cache_installed_at_another_path_hits_in_triton(tmp_path, monkeypatch, keys):
    src = triton_cache(tmp_path / "warm", monkeypatch)
    assert found_by_triton(src, monkeypatch) is not None
    moved(src, tmp_path / "pod", keys)
    found = found_by_triton(tmp_path / "pod", monkeypatch)
    assert found is not None, "Triton misses: its group file names the warm's paths"
    assert sorted(found) == sorted([*FILES, "triton_poi_fused_0.json"])
    assert all(path.startswith(str(tmp_path / "pod" / KEY) + "/") for path in found.values())


def test_a_group_file_already_right_is_left_as_it_is(tmp_path, monkeypatch, keys):
    src = triton_cache(tmp_path / "warm", monkeypatch)
    group = src / KEY / "__grp__triton_poi_fused_0.json"
    before = group.read_bytes()
    moved(src, src, keys)  # the warm's own path: the pull the docs name for vLLM 0.26
    assert group.read_bytes() == before
    assert found_by_triton(src, monkeypatch) is not None


def test_a_second_install_over_rewritten_groups_finds_every_unit_present(tmp_path, monkeypatch, keys):
    src = triton_cache(tmp_path / "warm", monkeypatch)
    with pack(src, sign_key=keys["priv"]) as packed:
        options = InstallOptions(trust=[keys["pub"]], preflight=False)
        install_bundle(packed, tmp_path / "pod", options)
        again = install_bundle(packed, tmp_path / "pod", options)
    assert again.units_installed == [] and again.units_replaced == []
    assert again.units_present


def test_folders_that_are_not_triton_kernels_get_no_group_file(tmp_path):
    root = make_vllm_tree(tmp_path / "root")
    before = tree_snapshot(root)
    assert triton_groups.write_groups(root) == 0
    assert tree_snapshot(root) == before


def test_a_linked_folder_is_not_followed(tmp_path):
    kernels = make_triton_tree(tmp_path / "elsewhere")
    for group in kernels.rglob("__grp__*.json"):
        group.unlink()
    top = tmp_path / "root"
    top.mkdir()
    (top / "triton").symlink_to(kernels, target_is_directory=True)
    assert triton_groups.write_groups(top) == 0
    assert not list(kernels.rglob("__grp__*.json"))


def test_a_missing_group_file_is_written_naming_the_kernel_files_beside_it(tmp_path):
    root = make_triton_tree(tmp_path / "t")
    for group in root.rglob("__grp__*.json"):
        group.unlink()
    assert triton_groups.write_groups(root) == 3
    group = json.loads((root / "ZQW3ABCD" / "__grp__triton_poi_fused_0.json").read_text())["child_paths"]
    assert group == {
        name: str(root / "ZQW3ABCD" / name)
        for name in (
            "triton_poi_fused_0.cubin",
            "triton_poi_fused_0.json",
            "triton_poi_fused_0.ptx",
            "triton_poi_fused_0.ttir",
        )
    }
