"""`cachetool pull` in a hardened pod: a read-only root filesystem and no writable temporary folder at all, only the
cache root writable (an emptyDir). The pull must work and write nothing outside the cache root, or fail in one line
naming what it needs: never a false *miss* (torch's key cannot be computed when its import finds no temp folder).

The read-only root is real: a private mount namespace (`unshare -m`) in which `/` (and /tmp, /var/tmp where they are
mounts of their own) is remounted read-only and the cache root is a fresh tmpfs; the rest of the machine is not
touched. Needs root and unshare; skipped where the kernel refuses a mount namespace."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cachetool.bundle.packing import pack
from cachetool.bundle.signing import generate_keypair, load_private_key
from cachetool.transfer.push import push
from tests.cache_trees import make_native_tree

ROOT = Path(__file__).resolve().parents[2]

# In the namespace: the cache root a writable tmpfs; then /, /tmp and /var/tmp read-only; cwd / (read-only too).
READ_ONLY = """
set -e
mount -t tmpfs tmpfs "$CACHE"
mount -o remount,bind,ro /
for m in /tmp /var/tmp; do
  if mountpoint -q "$m"; then mount -o remount,bind,ro "$m"; fi
done
cd /
exec "$@"
"""


def _read_only_run(cache: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TMPDIR", "TEMP", "TMP")}
    env.update(
        CACHE=str(cache), PYTHONPATH=str(ROOT), CACHETOOL_CONFIG_DIR=str(cache / "config"), PYTHONDONTWRITEBYTECODE="1"
    )
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", "-c", READ_ONLY, "bash", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.fixture(scope="module")
def read_only_ok(tmp_path_factory):
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare for a read-only mount namespace")
    probe = tmp_path_factory.mktemp("probe")
    r = _read_only_run(
        probe,
        sys.executable,
        "-c",
        "import tempfile\ntry:\n    tempfile.gettempdir()\nexcept FileNotFoundError:\n"
        "    print('no temp folder')\nelse:\n    print('temp folder found')",
    )
    if r.returncode != 0:
        pytest.skip(f"no mount namespace here: {r.stderr.strip()[-200:]}")
    assert r.stdout.strip() == "no temp folder", r  # the setting the tests are about, for real
    return True


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("ro-store")
    priv, pub, _ = generate_keypair(d / "signer")
    tree = make_native_tree(d / "tree", ranks=("rank_0_0",), layers=3)
    with pack(tree, sign_key=load_private_key(priv)) as b:
        push(b, f"file://{d}/store/llama:v1")
    return {"ref": f"file://{d}/store/llama:v1", "pub": str(pub), "dir": d}


def _pull(cache_root: Path, store, *extra: str):
    return [
        sys.executable,
        "-m",
        "cachetool",
        "pull",
        store["ref"],
        "--cache-root",
        str(cache_root),
        "--trust",
        store["pub"],
        *extra,
    ]


def test_pull_works_with_a_read_only_root_and_no_temp_folder(read_only_ok, store, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    r = _read_only_run(
        cache,
        *_pull(cache / "root", store, "--json"),
    )
    assert r.returncode == 0, r
    assert "pull: outcome=installed" in r.stderr, r.stderr
    assert "compiler factors" in r.stdout  # preflight really compared torch's key, not skipped


def test_pull_leaves_nothing_but_the_cache_in_the_root(read_only_ok, store, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    r = _read_only_run(
        cache, "bash", "-c", " ".join(f"'{a}'" for a in _pull(cache / "root", store)) + ' && ls -A "$CACHE/root"'
    )
    assert r.returncode == 0, r
    assert r.stdout.split()[-1:] == ["torch_compile_cache"] and ".cachetool-tmp" not in r.stdout, r.stdout


def test_pull_names_what_it_needs_when_nothing_is_writable(read_only_ok, store, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    r = _read_only_run(cache, *_pull(store["dir"] / "root-on-read-only-fs", store, "--on-miss", "continue"))
    assert r.returncode == 2, (
        r
    )  # the pod's own misconfiguration: a usage error, which --on-miss continue does not continue
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1, r.stderr
    assert "pull needs a writable folder" in errors[0] and "/tmp" in errors[0], errors
    assert "outcome=miss" not in r.stderr
