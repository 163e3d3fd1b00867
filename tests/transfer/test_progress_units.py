"""The push and pull progress bars count in binary units, as every size cachetool prints (issue 45, item 3): a bar
said GB (rich's decimal default) where the summary said GiB."""

from __future__ import annotations

import os
import re

from tests.cache_trees import make_native_tree

SIZE = re.compile(r"\d(?:\.\d+)? ?(bytes|[A-Za-z]?i?B)\b")


def test_the_bars_count_in_binary_units(tmp_path, cli, keys):
    tree = make_native_tree(tmp_path / "tree", ranks=("rank_0_0",), layers=2)
    next(tree.rglob("artifact_0")).write_bytes(os.urandom(3 << 20))  # a few MiB: the bar reaches MiB
    ref = f"file://{tmp_path}/store/tiny:v1"
    pushed = cli("push", tree, ref, "--sign-key", keys["priv"], "--progress")
    pulled = cli("pull", ref, "--cache-root", tmp_path / "root", "--trust", keys["pub"], "--progress")
    assert pushed.rc == 0 and pulled.rc == 0, (pushed, pulled)
    for bar in (pushed.err, pulled.err):
        units = set(SIZE.findall(bar))
        assert units and units <= {"bytes", "B", "KiB", "MiB", "GiB"}, (units, bar)
        assert "MiB" in units, bar
