"""cachetool/engines/torch/autotune_site.py: the ``.cachetool-site`` folder that makes a torch 2.11/2.12 program use
the coordinate-descent results its root ships (PyTorch issue #172819), on roots built from the documented layout
(fast: no program runs). Where a root gets the folder, where it loses it, that no bundle carries it, and where it
lands on the program's ``PYTHONPATH``."""

from __future__ import annotations

import json
import os
import time
import types
from pathlib import Path

import pytest

from cachetool import api
from cachetool.engines.torch import autotune_site
from cachetool.engines.torch.engine import TorchEngine
from cachetool.engines.torch.layout import scan, settle as settle_root
from cachetool.engines.torch.root_names import SITE
from cachetool.engines.torch.run import program_env
from tests.engines.torch.roots import make_torch_root

OLD_TORCH = "2.11.0+cu130"  # tunes again on a cache hit: needs the folder
UNCHECKED_TORCH = "2.14.0"  # a release the rule was not checked against: no folder
REUSE = autotune_site.source_file().read_bytes()  # cachetool/engines/torch/autotune_reuse.py, the folder's file


def _best_config(root: Path, rel: str = "inductor/ab/cabc.best_config", *, found_by_coordesc=True) -> Path:
    """What coordinate descent leaves beside a tuned kernel (the fields torch's AutotuneCache.save writes)."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "XBLOCK": 256,
                "num_warps": 8,
                "num_stages": 1,
                "configs_hash": "0" * 64,
                "found_by_coordesc": found_by_coordesc,
                "time_taken_ms": 3,
                "triton_cache_hash": None,
            }
        )
    )
    return path


def _tuned_root(root: Path, torch: str = OLD_TORCH) -> Path:
    """A warmed root whose facts name ``torch`` and that holds a coordinate-descent result."""
    make_torch_root(root, torch=torch)
    _best_config(root, "inductor/xx/y.best_config")
    return root


def settle(root: Path) -> Path | None:
    """The layout's settle (what an install and a start run): the root's recorded torch, then the folder."""
    settle_root(root)
    site = root / SITE
    return site if site.is_dir() else None


def _site_files(root: Path) -> dict[str, bytes]:
    site = root / SITE
    return {p.name: p.read_bytes() for p in site.iterdir()} if site.is_dir() else {}


def test_a_root_made_with_another_torch_records_that_torch_in_its_facts(tmp_path):
    """What this module builds on: make_torch_root(torch=...) writes the fact the folder's decision reads."""
    root, key = make_torch_root(tmp_path / "r", torch=OLD_TORCH)
    doc = json.loads((root / "facts" / key / "cache_key_factors.json").read_text())
    assert doc["factors"]["compiler"]["values"]["torch"] == OLD_TORCH


def test_settle_writes_the_rule_where_old_torch_facts_and_coordesc_results_meet(tmp_path):
    root = _tuned_root(tmp_path / "r")

    site = settle(root)

    assert site == root / ".cachetool-site"
    assert _site_files(root) == {"sitecustomize.py": REUSE}
    assert autotune_site.variables(root) == {"PYTHONPATH": str(site)}


def test_the_server_environment_names_the_site_folder_and_the_two_cache_folders(tmp_path):
    root = _tuned_root(tmp_path / "r")
    settle(root)

    assert TorchEngine().server_environment(root) == {
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
        "TRITON_CACHE_DIR": str(root / "triton"),
        "PYTHONPATH": str(root / ".cachetool-site"),
    }


def _unchecked_torch(root: Path) -> None:
    _tuned_root(root, torch=UNCHECKED_TORCH)


def _not_by_coordesc(root: Path) -> None:
    make_torch_root(root, torch=OLD_TORCH)
    _best_config(root, "inductor/xx/y.best_config", found_by_coordesc=False)
    _best_config(root, "inductor/zz/w.best_config", found_by_coordesc=False)


def _no_best_config(root: Path) -> None:
    make_torch_root(root, torch=OLD_TORCH)


def _unreadable_best_config(root: Path) -> None:
    make_torch_root(root, torch=OLD_TORCH)
    (root / "inductor/xx").mkdir(parents=True)
    (root / "inductor/xx/y.best_config").write_text("not json")
    (root / "inductor/xx/z.best_config").write_text("[true]")


@pytest.mark.parametrize(
    "build",
    [_unchecked_torch, _not_by_coordesc, _no_best_config, _unreadable_best_config],
    ids=["unchecked-torch-facts", "found-by-coordesc-false", "no-best-config", "unreadable-best-config"],
)
def test_settle_writes_no_folder_and_removes_one_left_there_where_the_root_does_not_need_it(tmp_path, build):
    root = tmp_path / "r"
    build(root)
    (root / ".cachetool-site").mkdir()
    (root / ".cachetool-site" / "sitecustomize.py").write_text("left from before\n")

    assert settle(root) is None

    assert not (root / ".cachetool-site").exists()
    assert autotune_site.variables(root) == {}
    assert "PYTHONPATH" not in TorchEngine().server_environment(root)


def test_settle_writes_the_folder_again_from_this_install_over_what_was_there(tmp_path):
    root = _tuned_root(tmp_path / "r")
    (root / ".cachetool-site").mkdir()
    (root / ".cachetool-site" / "sitecustomize.py").write_text("raise SystemExit('not ours')\n")
    (root / ".cachetool-site" / "extra.py").write_text("x = 1\n")

    settle(root)

    assert _site_files(root) == {"sitecustomize.py": REUSE}


def test_the_site_folder_is_never_scanned_for_packing(tmp_path):
    root = _tuned_root(tmp_path / "r")
    assert settle(root) is not None

    s = scan(root)

    assert not any(".cachetool-site" in u.path for u in s.units), [u.path for u in s.units]
    assert not any(".cachetool-site" in f.rel for f in s.files), [f.rel for f in s.files]
    assert any(f.rel == "inductor/xx/y.best_config" for f in s.files)  # the results it is for are shipped


def _bundle(tmp_path: Path, root: Path) -> Path:
    settle(root)  # as the warm leaves it: the folder is there when the root is packed
    out = tmp_path / "b.ctb"
    api.pack(root, out)
    return out


def _hostile_site(dest: Path) -> None:
    site = dest / ".cachetool-site"
    site.mkdir(parents=True)
    (site / "sitecustomize.py").write_text("raise SystemExit('hostile')\n")
    (site / "other.py").write_text("import os\n")


def test_an_install_replaces_whatever_the_site_folder_held_with_the_rule(tmp_path):
    bundle = _bundle(tmp_path, _tuned_root(tmp_path / "r"))
    dest = tmp_path / "dest"
    _hostile_site(dest)

    # the bundle's facts name torch 2.11 (a GPU box's), this CPU box has 2.13: the preflight's fingerprint check
    # refuses it, so the install skips the preflight as staging a cache from another machine does (--no-preflight)
    result = api.install(bundle, dest, insecure_skip_verify=True, preflight=False)

    assert "inductor/xx" in result.units_installed
    assert _site_files(dest) == {"sitecustomize.py": REUSE}
    assert (dest / "inductor/xx/y.best_config").is_file()


def test_an_install_of_a_root_that_does_not_need_it_removes_the_site_folder(tmp_path):
    root = tmp_path / "r"
    _unchecked_torch(root)
    bundle = _bundle(tmp_path, root)
    dest = tmp_path / "dest"
    _hostile_site(dest)

    # facts of a torch unlike this box's: the preflight would refuse, as for a cache staged from another machine
    result = api.install(bundle, dest, insecure_skip_verify=True, preflight=False)

    assert "inductor/xx" in result.units_installed
    assert not (dest / ".cachetool-site").exists()


def test_a_program_runs_with_the_probe_then_the_site_folder_then_the_callers_path(tmp_path, monkeypatch):
    root = _tuned_root(tmp_path / "r")
    settle(root)
    probe = tmp_path / "probe"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/user/one", "/user/two"]))

    env = program_env(root, probe)

    assert env["PYTHONPATH"].split(os.pathsep) == [str(probe), str(root / ".cachetool-site"), "/user/one", "/user/two"]
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(root / "inductor")
    assert env["TRITON_CACHE_DIR"] == str(root / "triton")


def test_without_a_site_folder_a_program_runs_with_the_probe_then_the_callers_path(tmp_path, monkeypatch):
    root = tmp_path / "r"
    make_torch_root(root, torch=OLD_TORCH)  # no coordinate-descent result: no folder
    settle(root)
    probe = tmp_path / "probe"
    monkeypatch.setenv("PYTHONPATH", "/user/one")
    assert program_env(root, probe)["PYTHONPATH"].split(os.pathsep) == [str(probe), "/user/one"]
    monkeypatch.delenv("PYTHONPATH")
    assert program_env(root, probe)["PYTHONPATH"] == str(probe)


def test_a_file_at_the_folders_name_is_replaced_by_the_folder(tmp_path):
    root = _tuned_root(tmp_path / "r")
    (root / SITE).write_text("not a folder")

    settle(root)

    assert _site_files(root) == {"sitecustomize.py": REUSE}


@pytest.mark.parametrize("needs_it", [True, False], ids=["root-needs-it", "root-does-not"])
def test_a_link_at_the_folders_name_is_removed_never_followed_nor_put_on_the_path(tmp_path, needs_it):
    """A link planted in the root (by anyone who can write it) never brings other code onto the program's path,
    and what it points at is left alone."""
    root = _tuned_root(tmp_path / "r", torch=OLD_TORCH if needs_it else UNCHECKED_TORCH)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "sitecustomize.py").write_text("raise SystemExit('not cachetool')")
    (root / SITE).symlink_to(elsewhere, target_is_directory=True)

    settle(root)

    site = root / SITE
    assert not site.is_symlink()
    assert (elsewhere / "sitecustomize.py").read_text() == "raise SystemExit('not cachetool')"
    if needs_it:
        assert _site_files(root) == {"sitecustomize.py": REUSE}
    else:
        assert not site.exists() and autotune_site.variables(root) == {}


def test_an_install_skips_a_bundles_unit_outside_the_layouts_folders():
    """No warm packs ``.cachetool-site`` (nor any top folder but inductor/, triton/ and facts/): a bundle that holds
    one was made by hand, and the install skips it, naming why."""
    from cachetool.engines.torch.layout import invalid_units

    units = [
        types.SimpleNamespace(path=p)
        for p in ("inductor/ab", "triton/K1", "facts/k1", ".cachetool-site", "elsewhere/x")
    ]
    skipped = invalid_units(types.SimpleNamespace(units=units), Path("/cache"))
    assert skipped == {
        ".cachetool-site": "not a folder of the torch layout",
        "elsewhere/x": "not a folder of the torch layout",
    }


def test_the_bytecode_python_writes_beside_the_module_leaves_the_folder_in_place(tmp_path):
    """A program that imported the module leaves ``__pycache__/`` beside it: the folder is still cachetool's, named
    on the path and not written again."""
    root = _tuned_root(tmp_path / "r")
    site = settle(root)
    (site / "__pycache__").mkdir()
    (site / "__pycache__" / "sitecustomize.cpython-311.pyc").write_bytes(b"pyc")
    inode = (site / "sitecustomize.py").stat().st_ino

    assert settle(root) == site
    assert (site / "sitecustomize.py").stat().st_ino == inode
    assert autotune_site.variables(root) == {"PYTHONPATH": str(site)}


def test_a_folder_a_stopped_settle_left_is_removed_once_it_is_old(tmp_path):
    root = _tuned_root(tmp_path / "r")
    left = root / f"{SITE}.abc123"
    left.mkdir()
    os.utime(left, (time.time() - 3600, time.time() - 3600))
    young = root / f"{SITE}.def456"
    young.mkdir()

    settle(root)

    assert not left.exists()
    assert young.exists()  # perhaps another settle's, still being written
