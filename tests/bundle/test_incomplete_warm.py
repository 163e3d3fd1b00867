"""A warm that did not complete (issue 28, item 6): Ctrl-C during the first piece left a rank folder with only
``cache_key_factors.json``, ``computation_graph.py`` and two folders. ``pack`` shipped it (exit 0, "packed 19
files"), and its install replaced a complete unit with it. Now ``pack`` refuses such a root in one line (exit 2) and
an install refuses a bundle whose native unit is incomplete (exit 3), leaving what is installed as it was."""

from __future__ import annotations

import json
import shutil

import pytest

from cachetool.bundle.ctb import write_ctb
from cachetool.bundle.manifest import canonical_json
from cachetool.bundle.packing import pack
from tests.cache_trees import local_factors, make_native_tree, manifest_obj, sign_bytes, tree_snapshot, write_raw_ctb
from tests.cli_calls import one_error_line


def _prefix(tree):
    return next(tree.glob("torch_compile_cache/*/rank_0_0/backbone"))


def _stopped_in_first_piece(tree):
    """What a warm stopped during its first piece leaves: the key's files and the compiler caches' folders."""
    for prefix in tree.glob("torch_compile_cache/*/rank_*/backbone"):
        for p in prefix.iterdir():
            if p.name not in ("cache_key_factors.json", "computation_graph.py", "inductor_cache", "triton_cache"):
                shutil.rmtree(p) if p.is_dir() else p.unlink()


def _edit_index(tree, edit):
    path = _prefix(tree) / "compile_index.json"
    index = json.loads(path.read_text())
    edit(index["pieces"])
    path.write_text(json.dumps(index))


INCOMPLETE = {
    "stopped in the first piece": _stopped_in_first_piece,
    "no index": lambda t: (_prefix(t) / "compile_index.json").unlink(),
    "index not JSON": lambda t: (_prefix(t) / "compile_index.json").write_text("{"),
    "artifact missing": lambda t: (_prefix(t) / "artifact_1").unlink(),
    "compile size missing": lambda t: _edit_index(t, lambda p: p.pop("1@8")),
    "last general piece missing": lambda t: _edit_index(t, lambda p: p.pop("1")),
}


@pytest.mark.parametrize("damage", INCOMPLETE, ids=list(INCOMPLETE))
def test_pack_refuses_a_root_whose_warm_did_not_complete(tmp_path, cli, damage):
    tree = make_native_tree(tmp_path / "src", layers=2)
    INCOMPLETE[damage](tree)
    r = cli("pack", tree, "-o", tmp_path / "b.ctb")
    assert r.rc == 2, r
    line = one_error_line(r.err)
    assert "warm did not complete" in line and "rank_0_0" in line, line
    assert not (tmp_path / "b.ctb").exists()


def test_a_complete_tree_still_packs(tmp_path, cli):
    r = cli("pack", make_native_tree(tmp_path / "src", layers=2), "-o", tmp_path / "b.ctb")
    assert r.rc == 0 and (tmp_path / "b.ctb").exists(), r


def test_install_refuses_an_incomplete_unit_over_a_complete_one(tmp_path, keys, cli):
    """A bundle signed by a trusted key (an old pack, or a signer gone bad) whose unit is what an interrupted warm
    leaves: refused (exit 3), the complete unit installed before stays byte for byte."""
    factors = local_factors()
    good = make_native_tree(tmp_path / "good", ranks=("rank_0_0",), layers=2, factors=factors)
    root = tmp_path / "root"
    with pack(good, sign_key=keys["key"]) as b:
        write_ctb(b, tmp_path / "good.ctb")
    assert cli("install", tmp_path / "good.ctb", "--cache-root", root, "--trust", keys["pub"]).rc == 0
    before = tree_snapshot(root)

    unit = f"torch_compile_cache/{factors['hash']}/rank_0_0"
    obj, stored = manifest_obj(
        [
            (f"{unit}/backbone/cache_key_factors.json", json.dumps(factors).encode()),
            (f"{unit}/backbone/computation_graph.py", b"def forward(self, x):\n    return x\n"),
        ],
        unit=unit,
    )
    obj["units"][0]["key"] = factors["hash"]
    mb = canonical_json(obj)
    bad = write_raw_ctb(tmp_path / "bad.ctb", mb, sign_bytes(mb, keys["key"]), stored)
    r = cli("install", bad, "--cache-root", root, "--trust", keys["pub"])
    assert r.rc == 3, r
    line = one_error_line(r.err)
    assert "incomplete" in line and unit in line and "compile_index.json" in line, line
    assert tree_snapshot(root) == before
    assert not [p for p in root.iterdir() if p.name.startswith(".cachetool")]


def test_a_real_warm_packs_and_the_same_root_without_its_index_does_not(tiny_warm, tmp_path, cli):
    """The rule holds for what the compiler really writes: the shared tiny warm's root packs; a copy of it
    without its index (a warm stopped before its pieces were done) does not."""
    r = cli("pack", tiny_warm["root"], "-o", tmp_path / "real.ctb")
    assert r.rc == 0, r
    copy = shutil.copytree(tiny_warm["root"], tmp_path / "copy", symlinks=True)
    for index in copy.rglob("compile_index.json"):
        index.unlink()
    r = cli("pack", copy, "-o", tmp_path / "b.ctb")
    assert r.rc == 2 and "warm did not complete" in one_error_line(r.err), r
    assert not (tmp_path / "b.ctb").exists()
