"""A manifest's layout and key kinds are an engine's names, opaque to the core: a well-formed name this cachetool
does not know (a newer engine's bundle) parses, and a store holding such a bundle still collects its garbage,
keeping that bundle's blobs; a malformed name is still a one-line ManifestError."""

from __future__ import annotations

import pytest

from cachetool.bundle.manifest import Manifest, canonical_json, stored_summary
from cachetool.errors import ManifestError
from cachetool.stores.base import RefEntry, RefIndex
from cachetool.stores.gc import reachable
from tests.cache_trees import manifest_obj

FILES = [("torch_compile_cache/h/rank_0_0/a.bin", b"a" * 10), ("torch_compile_cache/h/rank_0_0/b.bin", b"b" * 20)]


def newer_engines_manifest(**over) -> bytes:
    obj, _ = manifest_obj(FILES, layout="sglang2", keys=[{"hash": "h", "kind": "radix_graph", "factors": None}], **over)
    return canonical_json(obj)


def test_an_unknown_well_formed_layout_and_key_kind_parse():
    m = Manifest.from_bytes(newer_engines_manifest())
    assert m.layout == "sglang2" and [k.kind for k in m.keys] == ["radix_graph"]


@pytest.mark.parametrize("field, value", [("layout", "Not A Layout"), ("layout", 7), ("layout", "")])
def test_a_malformed_layout_is_one_line(field, value):
    obj, _ = manifest_obj(FILES, **{field: value})
    with pytest.raises(ManifestError) as e:
        Manifest.from_bytes(canonical_json(obj))
    assert "layout" in str(e.value) and "\n" not in str(e.value)


def test_a_malformed_key_kind_is_one_line():
    obj, _ = manifest_obj(FILES, keys=[{"hash": "h", "kind": "../x", "factors": None}])
    with pytest.raises(ManifestError) as e:
        Manifest.from_bytes(canonical_json(obj))
    assert "kind" in str(e.value) and "\n" not in str(e.value)


class OneManifestStore:
    url = "file:///test-store"

    def __init__(self, data: bytes):
        self.data = data

    def get_manifest(self, digest: str) -> bytes:
        return self.data


def test_gc_keeps_the_blobs_of_a_bundle_of_an_unknown_layout_and_schema():
    data = newer_engines_manifest(schema=2, extra_field={"a": 1})  # a newer cachetool's: more than it knows
    index = RefIndex("m", "v1", (RefEntry("sha256:" + "0" * 64, "cpu-x86_64", {}, 1, ""),))
    _, blobs = reachable(OneManifestStore(data), [index])
    assert blobs == {b.stored_digest[7:] for b in stored_summary(data).blobs} and len(blobs) == 2
