"""Digest pins (issue 15, item 3): ``pull REF@sha256:...`` pulls exactly that manifest; a wrong pin is refused;
``push`` prints the pinned ref. On OCI the pin is the OCI manifest digest (what skopeo and Kubernetes show)."""

from __future__ import annotations

import json
import re

from cachetool.bundle.ctb import write_ctb
from tests.cache_trees import tree_snapshot


def test_push_prints_the_pin_and_the_pin_pulls(any_store, bundle, keys, tree, tmp_path, cli):
    ctb = write_ctb(bundle, tmp_path / "b.ctb")
    r = cli("push", ctb, any_store.ref("v1"))
    assert r.rc == 0, r
    pinned = re.search(r"^pinned: (\S+)$", r.out, re.M).group(1)
    r = cli("push", ctb, any_store.ref("v1"), "--json")
    assert json.loads(r.out)["pinned"] == pinned
    assert re.match(r"^.+@sha256:[0-9a-f]{64}$", pinned)
    if any_store.kind != "oci":
        assert pinned.endswith(bundle.manifest_digest)

    r = cli("pull", pinned, "--cache-root", tmp_path / "root", "--trust", keys["pub"], "--json")
    assert r.rc == 0, r
    assert json.loads(r.out)["manifest_digest"] == bundle.manifest_digest
    assert tree_snapshot(tmp_path / "root") == tree_snapshot(tree)


def test_a_pin_follows_no_tag(any_store, bundle, cuda_bundle, keys, tmp_path, cli):
    """The tag moves on (another push replaces this platform's entry); the pin still names the first bundle."""
    from cachetool.bundle.packing import pack
    from tests.cache_trees import make_native_tree

    r1 = cli("push", write_ctb(bundle, tmp_path / "a.ctb"), any_store.ref("v1"), "--json")
    pinned = json.loads(r1.out)["pinned"]
    other_tree = make_native_tree(tmp_path / "other", layers=4)
    other = pack(other_tree, sign_key=keys["key"])
    assert cli("push", write_ctb(other, tmp_path / "b.ctb"), any_store.ref("v1")).rc == 0
    r = cli("pull", pinned, "--cache-root", tmp_path / "root", "--trust", keys["pub"], "--json")
    assert r.rc == 0 and json.loads(r.out)["manifest_digest"] == bundle.manifest_digest, r


def test_a_wrong_pin_is_refused(any_store, bundle, keys, tmp_path, cli):
    assert cli("push", write_ctb(bundle, tmp_path / "b.ctb"), any_store.ref("v1")).rc == 0
    base = any_store.ref("v1").rsplit(":", 1)[0]
    r = cli("pull", f"{base}@sha256:{'0' * 64}", "--cache-root", tmp_path / "root", "--trust", keys["pub"])
    assert r.rc == 5, r
    r.error_line()
    assert not (tmp_path / "root").exists()
    r = cli("push", write_ctb(bundle, tmp_path / "b.ctb"), f"{base}@sha256:{'0' * 64}")
    assert r.rc == 2 and "can only be pulled" in r.error_line(), r
