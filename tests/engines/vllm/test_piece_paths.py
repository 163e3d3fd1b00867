"""Where vLLM loads a compiled piece from (cachetool/engines/vllm/piece_paths.py): vLLM 0.26 reads each piece at the
absolute path the warm saved it at, so a server on a root pulled to another path does not start where that path is
gone (the H100, 2026-12-06). A pack records that path; a pull to another path is refused before any download; a
root installed anyway gets one line naming the path to pull into. Roots here are written as vLLM writes them (its
``vllm_compile_cache.py`` literal)."""

from __future__ import annotations

import logging
import pprint
from pathlib import Path

import pytest

from cachetool.engines.vllm import install_facts, piece_paths, releases
from cachetool.engines.vllm.layout import settle_installed
from cachetool.errors import PreflightError
from cachetool.layouts.entries import KeyFolder

KEY = "artifact_compile_range_1_2048_subgraph_0"


def write_root(root: Path, saved_under: Path, compiler: str = "inductor_standalone") -> Path:
    """A piecewise folder whose pieces were saved under ``saved_under`` (vLLM's handle: key, absolute path)."""
    folder = root / "torch_compile_cache" / "ad1a243e10" / "rank_0_0" / "backbone"
    folder.mkdir(parents=True)
    saved = saved_under / "torch_compile_cache" / "ad1a243e10" / "rank_0_0" / "backbone" / KEY
    entries = {((1, 2048), 0, compiler): {"graph_handle": (KEY, str(saved)), "cache_key": "k0"}}
    (folder / "vllm_compile_cache.py").write_text(pprint.PrettyPrinter(indent=4).pformat(entries))
    (folder / KEY).write_bytes(b"artifact")
    return root


def test_a_0_26_root_at_another_path_is_named_not_relocatable_with_the_path_to_pull_into(tmp_path):
    warm = tmp_path / "vllm-cache"
    root = write_root(tmp_path / "elsewhere", saved_under=warm)

    line = piece_paths.note(root, "0.26.0")

    assert line is not None and "\n" not in line
    assert "not relocatable" in line and line.endswith(f"pull into {warm}")
    assert piece_paths.saved_at(root) == {"torch_compile_cache/ad1a243e10/rank_0_0/backbone": str(warm)}


def test_a_root_at_the_warms_path_is_no_news(tmp_path):
    root = tmp_path / "vllm-cache"
    write_root(root, saved_under=root)
    assert piece_paths.saved_at(root) == {}
    assert piece_paths.note(root, "0.26.0") is None


def test_a_root_reached_through_a_link_to_the_warms_path_is_no_news(tmp_path):
    warm = write_root(tmp_path / "vllm-cache", saved_under=tmp_path / "vllm-cache")
    (tmp_path / "link").symlink_to(warm, target_is_directory=True)
    assert piece_paths.saved_at(tmp_path / "link") == {}


def test_the_older_inductor_adaptor_loads_by_hash_and_is_not_bound_to_a_path(tmp_path):
    root = write_root(tmp_path / "elsewhere", saved_under=tmp_path / "vllm-cache", compiler="inductor")
    assert piece_paths.saved_at(root) == {}
    assert piece_paths.note(root, "0.26.0") is None


@pytest.mark.parametrize("version", ["0.28.0", "0.32.0", "0.27.1", "0.25.0", None])
def test_a_release_that_joins_the_key_or_one_not_read_says_nothing(tmp_path, version):
    root = write_root(tmp_path / "elsewhere", saved_under=tmp_path / "vllm-cache")
    assert piece_paths.note(root, version) is None


def test_which_releases_load_by_the_saved_path():
    assert releases.loads_pieces_by_saved_path("0.26.0") is True
    assert releases.loads_pieces_by_saved_path("0.26.1+cu130") is True
    assert releases.loads_pieces_by_saved_path("0.28.0") is False
    assert releases.loads_pieces_by_saved_path("0.32.0.dev1+cpu") is False
    assert releases.loads_pieces_by_saved_path("0.27.0") is None  # not read
    assert releases.loads_pieces_by_saved_path("0.25.1") is None
    assert releases.loads_pieces_by_saved_path("nightly") is None


def test_a_cache_file_that_is_not_vllms_literal_is_skipped(tmp_path):
    root = write_root(tmp_path / "elsewhere", saved_under=tmp_path / "vllm-cache")
    next(root.rglob("vllm_compile_cache.py")).write_text("import os  # not a literal")
    assert piece_paths.saved_at(root) == {}


def test_an_install_settles_the_root_and_says_it_in_one_line(tmp_path, monkeypatch, caplog):
    warm = tmp_path / "vllm-cache"
    root = write_root(tmp_path / "elsewhere", saved_under=warm)
    monkeypatch.setattr(install_facts, "vllm_version", lambda: "0.26.0")

    with caplog.at_level(logging.WARNING, logger="cachetool.install"):
        settle_installed(root)

    lines = [r.getMessage() for r in caplog.records if r.name == "cachetool.install"]
    assert len(lines) == 1 and f"pull into {warm}" in lines[0]


def packed(tmp_path: Path, cli, keys) -> tuple[Path, Path]:
    """The warm's root (its pieces saved under it) packed into a signed bundle: (root, bundle)."""
    warm = write_root(tmp_path / "vllm-cache", saved_under=tmp_path / "vllm-cache")
    ctb = tmp_path / "x.ctb"
    assert cli("pack", warm, "-o", ctb, "--sign-key", keys["priv"]).rc == 0
    return warm, ctb


def install(ctb: Path, root: Path, keys, key_check=None):
    """The install a pull runs, with the server's key check (``key_check``) as the pull gives it."""
    from cachetool.bundle.ctb import open_ctb
    from cachetool.install import InstallOptions, install_bundle

    with open_ctb(ctb) as b:
        return install_bundle(b, root, InstallOptions(trust=[keys["pub"]]), key_check=key_check)


def server(root: Path, monkeypatch, compiles_nothing: str | None = None):
    """The key check of a server on ``root`` whose key folder the bundle holds (the key comparison itself is
    tests/engines/vllm/test_verdict.py's): what ``pull --engine vllm -- SERVER`` gives the install."""
    from cachetool.engines.vllm.key_check import ServerKeyCheck

    monkeypatch.setattr(ServerKeyCheck, "key_among", lambda self, keys: "ad1a243e10")
    return ServerKeyCheck("/models/m", [], root, compiles_nothing=compiles_nothing)


def test_a_pack_records_where_each_key_folders_pieces_were_saved_in_a_key_folder_of_its_own(tmp_path, cli, keys):
    """Beside vLLM's own key factors, not inside them (``diff`` compares those as vLLM wrote them)."""
    from cachetool.bundle.ctb import open_ctb

    warm, ctb = packed(tmp_path, cli, keys)
    with open_ctb(ctb) as b:
        kinds = {k.hash: k for k in b.manifest.keys}
    assert kinds["pieces.ad1a243e10"].kind == piece_paths.KIND
    assert kinds["pieces.ad1a243e10"].factors.values(piece_paths.KIND) == {"root": str(warm)}
    assert kinds["ad1a243e10"].kind == "piecewise" and piece_paths.KIND not in (kinds["ad1a243e10"].factors or {})


def test_a_pull_to_another_path_is_a_miss_before_download_where_vllm_loads_pieces_by_their_saved_path(
    tmp_path, cli, keys, monkeypatch
):
    """On the H100 a vLLM 0.26 server on a root pulled to another path did not start (the warm's path gone): the pull
    had installed it and said so in a warning line, exit 0. Now the pull for that server is a miss before any
    download, naming the path to pull into: nothing written (``--on-miss continue`` then starts the server cold)."""
    warm, ctb = packed(tmp_path, cli, keys)
    monkeypatch.setattr(install_facts, "vllm_version", lambda: "0.26.0")
    elsewhere = tmp_path / "elsewhere"

    with pytest.raises(PreflightError) as refused:
        install(ctb, elsewhere, keys, server(elsewhere, monkeypatch))

    line = str(refused.value)
    assert "\n" not in line and "vLLM 0.26.0 loads its compiled pieces from the path the warm saved them at" in line
    assert line.endswith(f"pull into {warm}") and "does not start" in line
    assert not elsewhere.exists() or not any(elsewhere.iterdir())


def test_an_eager_server_the_warms_path_a_link_to_it_and_a_release_that_joins_the_key_install(
    tmp_path, cli, keys, monkeypatch
):
    """An eager server reads no key folder (its pull installs only the folders that belong to none: here, nothing);
    at the warm's path, or a link to it, vLLM 0.26 finds its pieces; vLLM 0.32 joins the key to the folder."""
    warm, ctb = packed(tmp_path, cli, keys)
    monkeypatch.setattr(install_facts, "vllm_version", lambda: "0.26.0")
    elsewhere = tmp_path / "elsewhere"
    assert install(ctb, elsewhere, keys, server(elsewhere, monkeypatch, "--enforce-eager")).units_installed == []
    link = tmp_path / "link"
    link.symlink_to(warm, target_is_directory=True)
    for root in (warm, link):  # the same path as the warm's (a kept node's root, a link to it)
        install(ctb, root, keys, server(root, monkeypatch))
    monkeypatch.setattr(install_facts, "vllm_version", lambda: "0.32.0")
    assert install(ctb, elsewhere, keys, server(elsewhere, monkeypatch)).units_installed
    assert (elsewhere / "torch_compile_cache" / "ad1a243e10" / "rank_0_0" / "backbone" / KEY).is_file()


def test_without_vllm_here_the_bundles_vllm_is_the_servers(tmp_path, cli, keys, monkeypatch):
    """An init-container's image may hold cachetool alone: the server's vLLM is then the bundle's (its key check
    requires the same release), so a bundle warmed with vLLM 0.26 is refused at another path all the same, and one
    warmed with 0.32 is not."""
    from cachetool.bundle.ctb import open_ctb

    warm, ctb = packed(tmp_path, cli, keys)
    with open_ctb(ctb) as b:
        manifest = b.manifest
    monkeypatch.setattr(install_facts, "vllm_version", lambda: None)
    check = server(tmp_path / "elsewhere", monkeypatch)
    for vllm, refused in (("0.26.0", True), ("0.32.0", False)):
        as_warmed = type("M", (), {"keys": manifest.keys, "fingerprint": {**manifest.fingerprint, "vllm": vllm}})
        if refused:
            with pytest.raises(PreflightError, match=f"pull into {warm}"):
                check.expected_for(as_warmed)
        else:
            assert check.expected_for(as_warmed) == "ad1a243e10"


def test_pieces_saved_under_two_roots_name_both_and_a_hostile_record_is_no_crash(tmp_path, monkeypatch):
    monkeypatch.setattr(install_facts, "vllm_version", lambda: "0.26.0")

    def recorded(*roots):
        keys = [
            KeyFolder(f"pieces.{i}", piece_paths.KIND, {piece_paths.KIND: {"hash": "h", "values": v}})
            for i, v in enumerate({"root": r} for r in roots)
        ]
        return type("M", (), {"keys": keys, "fingerprint": {}})

    with pytest.raises(PreflightError, match="pull into one root: they were saved under 2 "):
        piece_paths.refuse_elsewhere(recorded("/a", "/b"), tmp_path, "0.26.0")
    piece_paths.refuse_elsewhere(recorded("relative/path", "/bad\x00path", 7), tmp_path, "0.26.0")  # not a path


def test_a_check_of_a_root_bound_to_another_path_is_a_miss_without_starting_vllm(tmp_path, monkeypatch):
    """check on such a root (installed without the preflight) would start a vLLM 0.26 that does not start: it says
    miss at once, naming the path, as it does for a root without this server's key folder."""
    from types import SimpleNamespace

    from cachetool.engines.vllm.check_verdict import before_starting

    warm = tmp_path / "vllm-cache"
    root = write_root(tmp_path / "elsewhere", saved_under=warm)
    (root / "torch_compile_cache" / "torch_aot_compile" / ("ab" * 32) / "rank_0_0").mkdir(parents=True)
    server = SimpleNamespace(compiles_nothing=None)
    monkeypatch.setattr(install_facts, "vllm_version", lambda: "0.26.0")

    out = before_starting(server, root, "/models/m", [])

    assert out is not None and not out.hit and out.to_json()["started"] is False
    assert out.miss_reason().startswith("the root cannot hit: vLLM 0.26.0") and f"pull into {warm}" in out.reason
    monkeypatch.setattr(install_facts, "vllm_version", lambda: "0.32.0")  # joins the key: vLLM must start to tell
    assert before_starting(server, root, "/models/m", []) is None
    monkeypatch.setattr(install_facts, "vllm_version", lambda: "0.26.0")
    write_root(warm, saved_under=warm)  # a node that kept the warm's root: vLLM 0.26 finds the pieces there
    assert before_starting(server, root, "/models/m", []) is None
