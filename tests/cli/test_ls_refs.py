"""``cachetool ls`` reads its target as every verb reads a ref (issue 45, item 2): ``ls file:///d/store/tiny`` was
exit 5 ("…/store/tiny does not exist") where ``pull`` reads the bundle name ``tiny`` of ``file:///d/store``; it now
lists that name's tags as one listing. The rule lives in ``cachetool.refs.admin.listing`` (tests/refs/
test_listing.py), which ``api.ls`` calls."""

from __future__ import annotations

import json

from tests.cache_trees import make_native_tree


def test_ls_of_a_bundle_name_without_a_tag_lists_its_tags(tmp_path, cli, keys):
    tree = make_native_tree(tmp_path / "tree", ranks=("rank_0_0",), layers=2)
    for tag in ("v1", "v2"):
        assert cli("push", tree, f"file://{tmp_path}/store/tiny:{tag}", "--sign-key", keys["priv"]).rc == 0
    r = cli("ls", f"file://{tmp_path}/store/tiny", "--json")
    assert r.rc == 0, r
    assert sorted(row["ref"] for row in json.loads(r.out)["refs"]) == ["tiny:v1", "tiny:v2"]
