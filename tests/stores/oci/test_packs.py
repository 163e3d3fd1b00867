"""Packs (issue 15, item 2): small blobs grouped into content-defined packs so a bundle of any size fits the
registry's manifest limit, while a re-push uploads nothing and a changed file re-uploads about one pack."""

from __future__ import annotations

import hashlib
import json
import uuid

from cachetool.stores.base import BlobRef
from cachetool.stores.oci import packs
from tests.cache_trees import packable_tree, tree_snapshot


def _blob(i: int) -> BlobRef:
    d = "sha256:" + hashlib.sha256(str(i).encode()).hexdigest()
    return BlobRef(d, 100, "sha256:" + hashlib.sha256(d.encode()).hexdigest(), 80)


def test_plan_is_deterministic_and_a_change_stays_local():
    blobs = [_blob(i) for i in range(20_000)]
    a = packs.plan(blobs)
    assert packs.plan(list(reversed(blobs))) == a
    assert 20_000 / len(a.packs) > 16 and len(a.packs) + len(a.singles) < packs.LAYER_BUDGET
    changed = blobs[:-1] + [_blob(99_999_999)]  # one file changed: one blob out, another in
    b = packs.plan(changed)
    before = {tuple(x.digest for x in p) for p in a.packs}
    after = {tuple(x.digest for x in p) for p in b.packs}
    assert len(after - before) <= 2 and len(before - after) <= 2


def test_small_bundles_keep_one_layer_per_blob():
    p = packs.plan([_blob(i) for i in range(packs.PACK_FROM)])
    assert p.packs == [] and len(p.singles) == packs.PACK_FROM


def test_packed_bundle_pushes_repushes_nothing_and_pulls(oci_registry, keys, tmp_path, cli):
    tree, rank = packable_tree(tmp_path / "tree", packs.PACK_FROM + 500)  # enough small blobs to be packed
    ref = f"{oci_registry.url}/team/packs-{uuid.uuid4().hex[:6]}:v1"
    args = ("--sign-key", keys["priv"], "--json")
    r = cli("push", tree, ref, *args)
    assert r.rc == 0, r
    first = json.loads(r.out)
    again = json.loads(cli("push", tree, ref, *args).out)
    assert again["blobs_uploaded"] == 0 and again["bytes_uploaded"] < 50_000, again  # index + signature only
    r = cli("pull", ref, "--cache-root", tmp_path / "root", "--trust", keys["pub"])
    assert r.rc == 0, r
    assert tree_snapshot(tmp_path / "root") == tree_snapshot(tree)
    (rank / "inductor_cache" / "k0" / "kernel_7.json").write_text("changed")
    changed = json.loads(cli("push", tree, ref, *args).out)
    # one or two packs of small blobs; the bytes are mostly the new bundle manifest and its signature envelope
    assert changed["blobs_uploaded"] < first["blobs_total"] / 10, (changed, first)
