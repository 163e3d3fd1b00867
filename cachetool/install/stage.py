"""Stage: every needed blob fetched once, verified and expanded into ``{root}/.cachetool-staging-*/tree`` (the same
file system as the root), folder modes set last.

A large blob is fetched into a file, verified and expanded from it, and its duplicates are copied locally. Small
blobs (:func:`cachetool.install.blobs.in_memory`) go in batches, one task per batch: each is read into memory
(:meth:`BundleSource.read_blob`), verified and expanded there, and its content written to every file that holds it;
a bundle of 100,000 Triton or Inductor kernels then costs a few system calls per file, not a temporary file each."""

from __future__ import annotations

import contextvars
import os
import posixpath
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cachetool.bundle import engine_rules
from cachetool.bundle.manifest import FileEntry, Manifest
from cachetool.bundle.source import BundleSource
from cachetool.errors import IncompleteUnitError
from cachetool.install import blobs
from cachetool.install.fs import DIR_FLAGS, copy_file, write_new
from cachetool.install.plan import Plan
from cachetool.install.timing import PhaseClock

BATCH = 256  # small blobs per task: a task's overhead is paid once for them all


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


def _folders(manifest: Manifest, plan: Plan) -> tuple[set[str], list[FileEntry]]:
    """The folders to create for the planned units (each unit's own, those its files lie in, the manifest's empty
    ones) and the files to write."""
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
    planned = {u.path for u in plan.units}
    for d in manifest.dirs:  # type: ignore[assignment]  # baseline (issue 46)  # once each, not once per unit: a Triton cache has 10,000 units
        unit = manifest.unit_of(d.path)  # type: ignore[attr-defined]  # baseline (issue 46)
        if unit is not None and unit.path in planned:
            need_dirs.add(d.path)  # type: ignore[attr-defined]  # baseline (issue 46)
    return need_dirs, wanted


def stage(
    source: BundleSource, manifest: Manifest, plan: Plan, staging: Path, workers: int | None, clock: PhaseClock
) -> tuple[int, int, int]:
    """Fetch, verify and expand every needed blob into ``staging/tree``; returns (bytes, files, blobs fetched)."""
    blob_dir = staging / "blobs"
    blob_dir.mkdir()
    tree = staging / "tree"
    tree.mkdir()
    need_dirs, wanted = _folders(manifest, plan)
    for d in sorted(need_dirs, key=lambda p: p.count("/")):
        (tree / d).mkdir(parents=True, exist_ok=True)
    by_digest: dict[str, list[FileEntry]] = {}
    for f in wanted:
        by_digest.setdefault(f.digest, []).append(f)
    small = sorted((d for d in by_digest if blobs.in_memory(manifest.blob(d))), key=lambda d: by_digest[d][0].path)
    large = sorted(set(by_digest) - set(small))
    writer = _Writer(source, manifest, by_digest, blob_dir, tree, clock)
    with ThreadPoolExecutor(workers or max(2, min(8, (os.cpu_count() or 1) * 2))) as ex, writer:
        # every unique blob once (fetch, verify, expand), then the duplicates of large ones as local copies
        nbytes = sum(_all(ex, writer.large, large))
        copies = [(by_digest[d][0], o) for d in large for o in by_digest[d][1:]]
        nbytes += sum(_all(ex, writer.copy, copies))
        nbytes += sum(_all(ex, writer.small_batch, [small[i : i + BATCH] for i in range(0, len(small), BATCH)]))
    # folder modes, deepest first (a read-only folder is fine once its content is written)
    dir_modes = {d.path: d.mode for d in manifest.dirs}
    for d in sorted(need_dirs, key=lambda p: -p.count("/")):
        os.chmod(tree / d, dir_modes.get(d, 0o755))
    return nbytes, len(wanted), len(by_digest)


class _Writer:
    """The staging workers' three tasks, each returning the bytes it wrote and adding its seconds to the clock."""

    def __init__(
        self,
        source: BundleSource,
        manifest: Manifest,
        by_digest: dict[str, list[FileEntry]],
        blob_dir: Path,
        tree: Path,
        clock: PhaseClock,
    ):
        self.source, self.manifest, self.by_digest = source, manifest, by_digest
        self.blob_dir, self.tree, self.clock = blob_dir, tree, clock
        self.tree_fd = -1

    def __enter__(self) -> _Writer:
        self.tree_fd = os.open(self.tree, DIR_FLAGS)  # small files are created relative to it
        return self

    def __exit__(self, *exc) -> None:
        os.close(self.tree_fd)

    def _scratch(self, digest: str) -> Path:
        return self.blob_dir / (digest.split(":", 1)[1] + ".zst")

    def large(self, digest: str) -> int:
        blob = self.manifest.blob(digest)
        zst = self._scratch(digest)
        t0 = time.perf_counter()
        self.source.fetch_blob(blob, zst)
        t1 = time.perf_counter()
        first = self.by_digest[digest][0]
        blobs.verify_and_expand(blob, zst, self.tree / first.path, first.mode)
        zst.unlink()
        self.clock.add_work({"read": t1 - t0, "verify": time.perf_counter() - t1})
        return blob.size

    def copy(self, pair: tuple[FileEntry, FileEntry]) -> int:
        first, other = pair
        t0 = time.perf_counter()
        copy_file(self.tree / first.path, self.tree / other.path, other.mode)
        self.clock.add_work({"write": time.perf_counter() - t0})
        return other.size

    def small_batch(self, digests: list[str]) -> int:
        """Read, verify and expand each small blob in memory, then write every file that holds it."""
        seconds = dict.fromkeys(("read", "verify", "write"), 0.0)
        nbytes = 0
        t0 = time.perf_counter()
        for digest in digests:
            blob = self.manifest.blob(digest)
            stored = self.source.read_blob(blob, self.blob_dir)
            t1 = time.perf_counter()
            content = blobs.expand_bytes(blob, stored)
            t2 = time.perf_counter()
            for f in self.by_digest[digest]:
                write_new(self.tree_fd, f.path, content, f.mode)
                nbytes += f.size
            t3 = time.perf_counter()
            seconds["read"] += t1 - t0
            seconds["verify"] += t2 - t1
            seconds["write"] += t3 - t2
            t0 = t3
        self.clock.add_work(seconds)
        return nbytes


def check_complete(manifest: Manifest, plan: Plan, staging: Path) -> None:
    """Refuse, before anything is committed, a staged unit that is not a complete cache of its layout (what an
    interrupted warm leaves, from an old pack or a signer gone bad): it would replace a complete unit."""
    for u in plan.units:
        reason = engine_rules.layouts().incomplete_reason(
            manifest.layout, staging / "tree" / u.path, u.rank is not None
        )
        if reason is not None:
            raise IncompleteUnitError(
                f"{u.path} in the bundle is incomplete ({reason}); refused: nothing installed", path=u.path
            )
