"""Sizes in one unit family, the same number for the same quantity, each named (issue 45, item 3).

One bundle showed three "compressed" sizes: `warm --push` 398319, `inspect` 373039, `ls` 389.0 KiB, and a progress
bar said GB where the summaries say GiB. Two quantities were behind them: the zstd blobs (`pack`, `inspect`) and what
a store holds, the blobs and the manifest (`warm --push`, `ls`). Each is now named, in binary units beside the exact
bytes that `--json` and every other report of the same quantity give."""

from __future__ import annotations

import json
import re

from tests.cache_trees import make_native_tree

DECIMAL_UNITS = re.compile(r"\d ?(kB|MB|GB|TB)\b")


def test_each_size_is_named_and_shows_the_bytes_every_report_shows(tmp_path, cli, keys):
    tree = make_native_tree(tmp_path / "tree", ranks=("rank_0_0",), layers=3)
    packed = cli("pack", tree, "-o", tmp_path / "b.ctb", "--sign-key", keys["priv"], "--json")
    blobs = json.loads(packed.out)["bytes"]["compressed"]
    ref = f"file://{tmp_path}/store/tiny:v1"
    assert cli("push", tmp_path / "b.ctb", ref).rc == 0
    stored = json.loads(cli("ls", ref, "--json").out)["refs"][0]["size"]
    assert stored > blobs  # the manifest is stored with the blobs

    texts = {
        "pack": cli("pack", tree, "-o", tmp_path / "c.ctb").out,
        "inspect": cli("inspect", ref).out,
        "ls": cli("ls", ref).out,
    }
    assert "compressed blobs " in texts["pack"] and f"({blobs} B)" in texts["pack"], texts["pack"]
    assert "compressed blobs " in texts["inspect"] and f"({blobs} B)" in texts["inspect"], texts["inspect"]
    assert "STORED" in texts["ls"] and f"({stored} B)" in texts["ls"], texts["ls"]
    for verb, text in texts.items():
        assert not DECIMAL_UNITS.search(text), (verb, text)


def test_warm_push_names_the_stored_size_as_ls_lists_it():
    """Its lines said ``398319 compressed`` of the blobs and the manifest together (no unit, the blobs' word)."""
    from cachetool.api import WarmSummary
    from cachetool.cli.compile_cmds import push_lines
    from cachetool.transfer.push import PushResult

    push = PushResult(
        ref="file:///d/store/tiny:v1",
        manifest_digest="sha256:" + "0" * 64,
        platform="cpu",
        signed=True,
        blobs_total=3,
        blobs_uploaded=3,
        blobs_skipped=0,
        bytes_uploaded=398700,
        bytes_skipped=0,
        platforms=["cpu"],
        seconds=0.1,
    )
    summary = WarmSummary(compile=None, push=push, bytes_raw=1973881, bytes_unique=1972812, bytes_compressed=398319)
    text = "\n".join(push_lines(summary))
    assert "stored 389.0 KiB (398319 B)" in text and "manifest" in text, text
    assert "compressed" not in text.replace("compressed blobs and manifest", ""), text
