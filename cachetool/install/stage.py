"""Stage: every needed blob fetched once, verified and expanded into ``{root}/.cachetool-staging-*/tree`` (the same
file system as the root), duplicates copied locally, folder modes set last."""

from __future__ import annotations

import contextvars
import os
import posixpath
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable

from cachetool.errors import IncompleteUnitError
from cachetool.install import blobs
from cachetool.install.fs import copy_file
from cachetool.install.plan import Plan
from cachetool.engines.layouts import incomplete_reason
from cachetool.bundle.manifest import FileEntry, Manifest
from cachetool.bundle.source import BundleSource


def _all(ex: ThreadPoolExecutor, fn: Callable, items: Iterable) -> list:
    """``fn`` over ``items`` in ``ex``, each in a copy of the caller's context (the bounds it applied:
    :mod:`cachetool.bounds`); on the first failure the tasks not yet started are cancelled (a missing blob must not
    be followed by downloads of all the others)."""
    futures = [ex.submit(contextvars.copy_context().run, fn, x) for x in items]
    try:
        return [f.result() for f in futures]
    except BaseException:
        for f in futures:
            f.cancel()
        raise


def stage(source: BundleSource, manifest: Manifest, plan: Plan, staging: Path,
           workers: int | None) -> tuple[int, int, int]:
    """Fetch, verify and expand every needed blob into ``staging/tree``; returns (bytes, files, blobs fetched)."""
    blob_dir = staging / "blobs"
    blob_dir.mkdir()
    tree = staging / "tree"
    tree.mkdir()
    dir_modes = {d.path: d.mode for d in manifest.dirs}
    # folders of the units, parents first
    need_dirs = set()
    wanted: list[FileEntry] = []
    for u in plan.units:
        need_dirs.add(u.path)
        for f in plan.files[u.path]:
            wanted.append(f)
            d = posixpath.dirname(f.path)
            while d and d not in need_dirs and d != posixpath.dirname(u.path):
                need_dirs.add(d)
                d = posixpath.dirname(d)
        for d in dir_modes:
            if d == u.path or d.startswith(u.path + "/"):
                need_dirs.add(d)
    for d in sorted(need_dirs, key=lambda p: p.count("/")):
        (tree / d).mkdir(parents=True, exist_ok=True)
    by_digest: dict[str, list[FileEntry]] = {}
    for f in wanted:
        by_digest.setdefault(f.digest, []).append(f)

    def one(digest_: str) -> int:
        blob = manifest.blob(digest_)
        zst = blob_dir / (digest_.split(":", 1)[1] + ".zst")
        source.fetch_blob(blob, zst)
        group = by_digest[digest_]
        blobs.verify_and_expand(blob, zst, tree / group[0].path, group[0].mode)
        zst.unlink()
        return blob.size

    def copy(pair: tuple[FileEntry, FileEntry]) -> int:
        first, other = pair
        copy_file(tree / first.path, tree / other.path, other.mode)
        return other.size

    with ThreadPoolExecutor(workers or max(2, min(8, (os.cpu_count() or 1) * 2))) as ex:
        # every unique blob once (fetch, verify, expand), then the duplicates as local copies
        sizes = _all(ex, one, sorted(by_digest))
        copies = [(g[0], o) for g in by_digest.values() for o in g[1:]]
        nbytes = sum(sizes) + sum(_all(ex, copy, copies))
    # folder modes, deepest first (a read-only folder is fine once its content is written)
    for d in sorted(need_dirs, key=lambda p: -p.count("/")):
        os.chmod(tree / d, dir_modes.get(d, 0o755))
    return nbytes, len(wanted), len(sizes)


def check_complete(manifest: Manifest, plan: Plan, staging: Path) -> None:
    """Refuse, before anything is committed, a staged unit that is not a complete cache of its layout (what an
    interrupted warm leaves, from an old pack or a signer gone bad): it would replace a complete unit."""
    for u in plan.units:
        reason = incomplete_reason(manifest.layout, staging / "tree" / u.path, u.rank is not None)
        if reason is not None:
            raise IncompleteUnitError(f"{u.path} in the bundle is incomplete ({reason}); refused: nothing "
                                      "installed", path=u.path)
