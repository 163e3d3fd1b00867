"""The marks of vLLM starts that did not finish (issue 34, item 5), without vLLM: a start on a root under
:func:`cachetool.engines.vllm.unfinished.marked` that writes into a key folder, then stops, completes or is killed.

Before, a warm stopped in the middle of vLLM's compile left a key folder that nothing told from a complete one, and
``pack`` shipped it. Now ``pack`` refuses the folders a stopped start left unfinished (exit 2, naming the mark), the
whole root while a start runs or after one was killed outright, and a later start that completes settles the marks
of the folders it finished (tests/engines/vllm/real/test_stop_signals.py runs the same with real vLLM and real
signals)."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest

from cachetool.engines.root_names import INCOMPLETE_DIR
from cachetool.engines.vllm import unfinished
from cachetool.errors import StopRequested
from tests.cache_trees import AOT, aged, make_aot_tree
from tests.cli_calls import one_error_line

OTHER = "torch_compile_cache/torch_aot_compile/" + "cd" * 32


def _w(path: Path, data: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)


def _write_key_folder(root: Path, rel: str) -> None:
    _w(root / rel / "inductor_cache" / "ef" / "cef.so", b"\x7fELF" + b"\2" * 1000, 0o755)


def _stopped_start(root: Path, *writes: str) -> None:
    with pytest.raises(StopRequested):
        with unfinished.marked(root, "warm"):
            for rel in writes:
                _write_key_folder(root, rel)
            raise StopRequested("SIGTERM")


def _marks(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((root / INCOMPLETE_DIR).glob("*.json"))]


def test_a_stopped_start_marks_the_folders_it_wrote_and_pack_refuses_them(tmp_path, cli):
    root = aged(make_aot_tree(tmp_path / "root"))
    _stopped_start(root, OTHER)
    [mark] = _marks(root)
    assert mark["folders"] == [OTHER] and mark["command"] == "warm" and mark["pid"] == os.getpid(), mark
    r = cli("pack", root, "-o", tmp_path / "b.ctb")
    assert r.rc == 2, r
    line = one_error_line(r.err)
    assert "warm did not complete" in line and OTHER in line and INCOMPLETE_DIR in line, line
    assert "stopped before it finished this folder" in line, line
    assert not (tmp_path / "b.ctb").exists()
    # the key folder it did not write still packs alone, and no mark travels in a bundle
    r = cli("pack", root / AOT, "-o", tmp_path / "a.ctb")
    assert r.rc == 0, r


def test_a_start_that_wrote_no_key_folder_leaves_no_mark(tmp_path, cli):
    root = aged(make_aot_tree(tmp_path / "root"))
    _stopped_start(root)
    assert not (root / INCOMPLETE_DIR).exists()
    assert cli("pack", root, "-o", tmp_path / "b.ctb").rc == 0


def test_the_whole_root_is_refused_while_a_start_runs(tmp_path, cli):
    root = aged(make_aot_tree(tmp_path / "root"))
    with unfinished.marked(root, "check"):
        r = cli("pack", root, "-o", tmp_path / "b.ctb")
        assert r.rc == 2, r
        line = one_error_line(r.err)
        assert "a check started" in line and "has not finished" in line and INCOMPLETE_DIR in line, line
        for unit in (root / AOT / "rank_0_0", root / "modelinfos"):
            assert unfinished.incomplete_reason(unit) is not None, unit
    assert not (root / INCOMPLETE_DIR).exists()  # it completed (and wrote nothing)
    assert cli("pack", root, "-o", tmp_path / "b.ctb").rc == 0


def test_a_completed_start_settles_the_folders_it_finished(tmp_path, cli):
    root = aged(make_aot_tree(tmp_path / "root"))
    third = "torch_compile_cache/torch_aot_compile/" + "ef" * 32
    _stopped_start(root, OTHER, third)
    assert _marks(root)[0]["folders"] == sorted([OTHER, third])
    aged(root)
    with unfinished.marked(root, "warm"):  # a warm of the same server as the stopped one's first folder
        _write_key_folder(root, OTHER)
    [mark] = _marks(root)
    assert mark["folders"] == [third], mark  # what it did not finish stays refused
    assert unfinished.incomplete_reason(root / OTHER / "inductor_cache") is None
    assert unfinished.incomplete_reason(root / third / "inductor_cache") is not None

    with unfinished.marked(root, "warm"):
        _write_key_folder(root, third)
    assert not (root / INCOMPLETE_DIR).exists()
    assert cli("pack", root, "-o", tmp_path / "b.ctb").rc == 0


def _killed_mark(root: Path, started: float, **fields) -> Path:
    """The mark a start killed outright leaves (it names no folder)."""
    doc = {
        "command": "warm",
        "pid": 999_999_999,
        "host": socket.gethostname(),
        "process_start": 1,
        "started": started,
        "folders": None,
        **fields,
    }
    path = root / INCOMPLETE_DIR / "warm-killed.json"
    _w(path, json.dumps(doc).encode())
    return path


def test_a_killed_start_refuses_the_root_until_the_next_start_settles_it(tmp_path, cli):
    root = aged(make_aot_tree(tmp_path / "root"))
    path = _killed_mark(root, time.time() - 100)
    _write_key_folder(root, OTHER)  # what the killed start wrote before it died, a minute ago
    aged(root / OTHER, 60)
    r = cli("pack", root / AOT, "-o", tmp_path / "b.ctb")  # a folder it did not write: refused all the same
    assert r.rc == 2 and "has not finished: it runs, or was killed" in one_error_line(r.err), r
    with unfinished.marked(root, "check"):  # the next start: before vLLM runs, the killed start's folders are named
        assert json.loads(path.read_text())["folders"] == [OTHER]
    assert json.loads(path.read_text())["folders"] == [OTHER]  # this check wrote nothing: OTHER stays unfinished
    assert cli("pack", root / AOT, "-o", tmp_path / "b.ctb").rc == 0
    assert cli("pack", root, "-o", tmp_path / "c.ctb").rc == 2
    with unfinished.marked(root, "warm"):
        _write_key_folder(root, OTHER)
    assert not (root / INCOMPLETE_DIR).exists()


def test_a_running_start_s_mark_is_left_to_it(tmp_path):
    root = aged(make_aot_tree(tmp_path / "root"))
    me = unfinished.Mark.new(root, "warm")  # this process: running
    me.path = root / INCOMPLETE_DIR / "warm-running.json"
    me.write()
    _write_key_folder(root, OTHER)
    with unfinished.marked(root, "check"):
        pass
    assert json.loads(me.path.read_text())["folders"] is None  # still running: not settled by another start


def test_an_unreadable_mark_refuses_the_whole_root(tmp_path):
    root = make_aot_tree(tmp_path / "root")
    _w(root / INCOMPLETE_DIR / "warm-x.json", b"{not json")
    reason = unfinished.incomplete_reason(root / AOT / "rank_0_0")
    assert reason is not None and "warm-x.json" in reason, reason


def test_a_folder_outside_a_root_has_no_marks(tmp_path):
    folder = tmp_path / "copied" / "rank_0_0"
    folder.mkdir(parents=True)
    assert unfinished.incomplete_reason(folder) is None
