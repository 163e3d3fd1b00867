"""Triton's group files name a kernel's files by absolute path, and Triton takes a kernel from its cache only where
the named files exist. An install rewrites the group files of the units it installed for where it put them
(:mod:`cachetool.layouts.triton_groups`), so that a Triton cache packed at one path hits at another once the first
is gone: the fresh pod. Triton's own cache manager is the judge."""

from __future__ import annotations

import json
import shutil

import pytest

from cachetool.bundle.packing import pack
from cachetool.install import InstallOptions, install_bundle
from cachetool.layouts import triton_groups

pytest.importorskip("triton")

from triton.runtime.cache import FileCacheManager

KEY = "KERNELHASH0"
KERNEL = "triton_poi_fused_0"
FILES = {f"{KERNEL}.ttir": "module {}", f"{KERNEL}.cubin": b"CUBIN" * 10}
GROUP = f"__grp__{KERNEL}.json"


def triton_cache(folder, monkeypatch):
    """One kernel written into ``folder`` as ``triton.compile`` writes it: its files, its metadata, its group."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(folder))
    manager = FileCacheManager(KEY)
    group = {name: manager.put(data, name) for name, data in FILES.items()}
    meta = {"name": KERNEL, "target": {"backend": "cuda", "arch": 90, "warp_size": 32}}
    group[f"{KERNEL}.json"] = manager.put(json.dumps(meta), f"{KERNEL}.json")
    manager.put_group(f"{KERNEL}.json", group)
    return folder


def found_by_triton(folder, monkeypatch):
    """What Triton's cache manager finds of the kernel in ``folder`` (None or a part: a miss, compiled again)."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(folder))
    return FileCacheManager(KEY).get_group(f"{KERNEL}.json")


def install(packed, dst, keys):
    return install_bundle(packed, dst, InstallOptions(trust=[keys["pub"]], preflight=False))


def moved(src, dst, keys):
    """``src`` packed, removed (a fresh pod has no warm's root), and installed at ``dst``."""
    with pack(src, sign_key=keys["priv"]) as packed:
        shutil.rmtree(src)
        return install(packed, dst, keys)


def test_a_triton_cache_installed_at_another_path_hits_in_triton(tmp_path, monkeypatch, keys):
    src = triton_cache(tmp_path / "warm", monkeypatch)
    assert found_by_triton(src, monkeypatch) is not None
    moved(src, tmp_path / "pod", keys)
    found = found_by_triton(tmp_path / "pod", monkeypatch)
    assert found is not None, "Triton misses: its group file names the warm's paths"
    assert list(found) == [*FILES, f"{KERNEL}.json"]  # Triton's own names, in its order
    assert set(found.values()) == {str(tmp_path / "pod" / KEY / name) for name in found}
    assert oct((tmp_path / "pod" / KEY / GROUP).stat().st_mode & 0o777) == oct(0o644)


def test_a_group_file_already_naming_its_folder_is_left_as_it_is(tmp_path, monkeypatch, keys):
    src = triton_cache(tmp_path / "warm", monkeypatch)
    before = (src / KEY / GROUP).read_bytes()
    moved(src, src, keys)  # the warm's own path: the pull the docs name for vLLM 0.26
    assert (src / KEY / GROUP).read_bytes() == before
    assert found_by_triton(src, monkeypatch) is not None


def test_a_tampered_group_file_is_put_right_by_the_next_install(tmp_path, monkeypatch, keys):
    src = triton_cache(tmp_path / "warm", monkeypatch)
    pod = tmp_path / "pod"
    with pack(src, sign_key=keys["priv"]) as packed:
        install(packed, pod, keys)
        (pod / KEY / "evil.cubin").write_bytes(b"EVIL")
        group = pod / KEY / GROUP
        group.write_text(
            json.dumps(
                {
                    "child_paths": {
                        f"{KERNEL}.json": str(pod / KEY / f"{KERNEL}.json"),
                        "evil.cubin": str(pod / KEY / "evil.cubin"),
                    }
                }
            )
        )
        again = install(packed, pod, keys)
    assert again.units_replaced == [KEY]
    assert sorted(found_by_triton(pod, monkeypatch)) == sorted([*FILES, f"{KERNEL}.json"])


@pytest.mark.parametrize(
    "content",
    ["not json", json.dumps(["a list"]), json.dumps({"child_paths": {"../escape.cubin": "/x"}})],
    ids=["not-json", "not-a-mapping", "a-path-not-a-name"],
)
def test_a_group_file_that_is_no_triton_group_is_left_as_it_is(tmp_path, monkeypatch, keys, content):
    src = triton_cache(tmp_path / "warm", monkeypatch)
    (src / KEY / GROUP).write_text(content)
    moved(src, tmp_path / "pod", keys)
    assert (tmp_path / "pod" / KEY / GROUP).read_text() == content


def test_a_group_naming_a_file_its_folder_lacks_is_left_as_it_is(tmp_path, monkeypatch, keys):
    src = triton_cache(tmp_path / "warm", monkeypatch)
    group = json.loads((src / KEY / GROUP).read_text())
    group["child_paths"]["gone.ptx"] = str(src / KEY / "gone.ptx")
    (src / KEY / GROUP).write_text(json.dumps(group))
    moved(src, tmp_path / "pod", keys)
    assert "gone.ptx" in json.loads((tmp_path / "pod" / KEY / GROUP).read_text())["child_paths"]
    assert str(tmp_path / "warm") in (tmp_path / "pod" / KEY / GROUP).read_text()


def test_only_the_units_an_install_put_in_place_are_touched(tmp_path, monkeypatch, keys):
    src = triton_cache(tmp_path / "warm", monkeypatch)
    pod = tmp_path / "pod"
    (pod / "OTHERHASH").mkdir(parents=True)  # a kernel of the user's own, in the root before the pull
    stale = pod / "OTHERHASH" / GROUP
    stale.write_text(json.dumps({"child_paths": {"x.cubin": "/elsewhere/x.cubin"}}))
    (pod / "OTHERHASH" / "x.cubin").write_bytes(b"x")
    before = stale.read_bytes()
    moved(src, pod, keys)
    assert found_by_triton(pod, monkeypatch) is not None
    assert stale.read_bytes() == before  # not the bundle's: left as the user had it


def test_a_group_file_that_cannot_be_written_costs_one_line_not_the_install(tmp_path, monkeypatch):
    folder = tmp_path / "k"
    folder.mkdir()
    (folder / "a.cubin").write_bytes(b"a")
    group = folder / GROUP
    group.write_text(json.dumps({"child_paths": {"a.cubin": "/warm/a.cubin"}}))

    def disk_full(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(triton_groups, "atomic_write", disk_full)
    lines: list[str] = []
    assert triton_groups.rewrite_groups([group], lines.append) == 0
    assert len(lines) == 1 and str(group) in lines[0] and "No space left on device" in lines[0]
