"""kill -9 at random points of an install leaves no partial tree and a rerun completes; 8 concurrent installs of
one bundle give one tree and all succeed."""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cachetool.bundle.ctb import open_ctb
from tests.cache_trees import make_native_tree, tree_snapshot

RANKS = tuple(f"rank_{r}_0" for r in range(8))


@pytest.fixture(scope="module")
def big_bundle(tmp_path_factory, keys):
    from cachetool.bundle.ctb import write_ctb
    from cachetool.bundle.packing import pack

    d = tmp_path_factory.mktemp("big")
    src = make_native_tree(d / "src", ranks=RANKS, layers=6)
    rng = random.Random(0)
    for r in RANKS:  # 2 MiB of incompressible data per rank, so an install takes a while
        p = next((src / "torch_compile_cache").iterdir()) / r / "backbone" / "inductor_cache" / "big.so"
        p.write_bytes(rng.randbytes(2 << 20))
    with pack(src, sign_key=keys["priv"]) as b:
        write_ctb(b, d / "big.ctb")
    return src, d / "big.ctb"


def _cmd(bundle: Path, root: Path, pub: Path) -> list[str]:
    # --no-preflight: preflight writes nothing; skipping it spends the test's time in the writing phases
    return [
        sys.executable,
        "-m",
        "cachetool",
        "install",
        str(bundle),
        "--cache-root",
        str(root),
        "--trust",
        str(pub),
        "--no-preflight",
    ]


def _check_no_partial_tree(root: Path, src: Path, units: list[str]) -> tuple[int, bool]:
    """Every unit is absent or complete; nothing but units and staging folders exists. Returns (#units, staging?)."""
    complete = 0
    for u in units:
        if (root / u).exists():
            assert tree_snapshot(root / u) == tree_snapshot(src / u), f"partial unit {u}"
            complete += 1
    staging = False
    if root.exists():
        for p in root.iterdir():
            if p.name.startswith(".cachetool-staging-"):
                staging = True
                continue
            assert p.name == "torch_compile_cache", p
        for p in root.rglob("*"):
            rel = p.relative_to(root).as_posix()
            if rel.startswith(".cachetool-staging-"):
                continue
            assert any(rel == u or rel.startswith(u + "/") or u.startswith(rel + "/") for u in units), rel
    return complete, staging


def _wait_for_staging(root: Path, proc: subprocess.Popen, timeout: float = 30.0) -> float | None:
    """Poll until an install's staging folder appears (its writing phase began); return the time, or None."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        if root.exists() and any(p.name.startswith(".cachetool-staging-") for p in root.iterdir()):
            return time.monotonic()
        time.sleep(0.001)
    return None


def test_kill_9_at_random_points_then_rerun(big_bundle, tmp_path, keys):
    src, bundle = big_bundle
    with open_ctb(bundle) as b:
        units = [u.path for u in b.manifest.units]
    # time one full install (subprocess, as below) and its writing phase, to aim the kills
    timing = tmp_path / "timing"
    t0 = time.monotonic()
    p = subprocess.Popen(_cmd(bundle, timing, keys["pub"]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t_stage = _wait_for_staging(timing, p)
    assert p.wait() == 0
    full = time.monotonic() - t0
    writing = max(0.02, time.monotonic() - (t_stage or t0))
    root = tmp_path / "root"
    rng = random.Random(1234)
    killed_while_writing = 0
    for i in range(40):  # an install without torch imports is short: kill until several landed in writing
        if i >= 10 and killed_while_writing >= 3:
            break
        p = subprocess.Popen(_cmd(bundle, root, keys["pub"]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if i % 2:  # anywhere in the run
            time.sleep(rng.uniform(0.0, 1.1) * full)
        else:  # inside the writing phase: fetching, decompressing, renaming units into place
            if _wait_for_staging(root, p) is not None:
                time.sleep(rng.uniform(0.0, 1.0) * writing)
        alive = p.poll() is None
        p.send_signal(signal.SIGKILL)
        p.wait()
        complete, staging = _check_no_partial_tree(root, src, units)
        if alive and staging:
            killed_while_writing += 1
        if complete == len(units):  # it finished: start over so later kills hit a fresh install again
            shutil.rmtree(root)
    r = subprocess.run(_cmd(bundle, root, keys["pub"]), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert tree_snapshot(root) == tree_snapshot(src)  # complete, and the stale staging folders are gone
    # the kills did land inside installs' writing phases, or the test proves nothing
    assert killed_while_writing >= 2


def test_eight_concurrent_installs(big_bundle, tmp_path, keys):
    src, bundle = big_bundle
    root = tmp_path / "root"
    procs = [
        subprocess.Popen(_cmd(bundle, root, keys["pub"]), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(8)
    ]
    results = [(p.wait(), *p.communicate()) for p in procs]
    assert all(rc == 0 for rc, _, _ in results), results
    installed = [out for rc, out, _ in results if out.startswith("installed")]
    assert len(installed) == 1, [o for _, o, _ in results]  # one did the work, the others found it in place
    assert tree_snapshot(root) == tree_snapshot(src)


@pytest.mark.parametrize("after_renames", [1, 4, 7])
def test_kill_9_between_unit_renames(big_bundle, tmp_path, keys, after_renames):
    """Deterministic: the process SIGKILLs itself right before its N+1-th unit rename. The units already renamed
    are complete, the others absent; a rerun completes the tree."""
    src, bundle = big_bundle
    with open_ctb(bundle) as b:
        units = [u.path for u in b.manifest.units]
    root = tmp_path / "root"
    code = f"""
import os, signal, sys
n = [0]
real = os.rename
def rename(*a, **k):
    if k.get("src_dir_fd") is not None and a[0].startswith("rank_"):
        if n[0] == {after_renames}:
            os.kill(os.getpid(), signal.SIGKILL)
        n[0] += 1
    return real(*a, **k)
os.rename = rename
from cachetool.cli import main
sys.exit(main(sys.argv[1:]))
"""
    r = subprocess.run([sys.executable, "-c", code, *_cmd(bundle, root, keys["pub"])[3:]], capture_output=True)
    assert r.returncode == -signal.SIGKILL, r.stderr
    complete, staging = _check_no_partial_tree(root, src, units)
    assert complete == after_renames and staging
    r = subprocess.run(_cmd(bundle, root, keys["pub"]), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"{after_renames} already present" in r.stdout
    assert tree_snapshot(root) == tree_snapshot(src)
