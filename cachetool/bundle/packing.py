"""Packing a cache tree into a bundle.

:func:`pack` scans a cache with a layout, hashes every file, compresses each *unique* content once with zstd
into a work folder and builds the manifest (and a signature, given a key). The result is a
:class:`PackedBundle`: a :class:`cachetool.bundle.source.BundleSource` (so it installs directly) that also exposes
what a store push uploads (blob refs and a local path of each blob's stored bytes). Its single-file form, the
``.ctb``, is :mod:`cachetool.bundle.ctb`'s.
"""

from __future__ import annotations

import abc
import copy
import hashlib
import io
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cachetool.bundle import engine_rules
from cachetool.bundle.manifest import DirEntry, FileEntry, Manifest, manifest_digest, platform_key
from cachetool.bundle.paths import validate_relpath
from cachetool.bundle.source import BundleSource
from cachetool.digests import CHUNK as _CHUNK, BlobRef, sha256_file
from cachetool.errors import (
    IncompleteCacheError,
    NotFoundError,
    UnsafePathError,
    UsageError,
    disk_full,
    disk_full_cause,
)
from cachetool.layouts.base import LayoutScan


def _workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


# ---------------------------------------------------------------------------------------------------------------
class PackedBundle(BundleSource):
    """A bundle available locally: from :func:`pack` (blobs in a work folder) or a ``.ctb`` file
    (:func:`cachetool.bundle.ctb.open_ctb`).

    Use as a context manager (or call :meth:`close`) to delete temporary files.
    """

    description: str
    manifest: Manifest

    def __init__(self, manifest_bytes: bytes, signature: bytes | None, description: str, *, parse: bool = True):
        self._manifest_bytes = manifest_bytes
        self._signature = signature
        self.description = description
        # A .ctb may be hostile; parsing validates. Parse errors surface as VerificationError.
        self.manifest = Manifest.from_bytes(manifest_bytes) if parse else None  # type: ignore[assignment]

    # BundleSource
    def manifest_bytes(self) -> bytes:
        return self._manifest_bytes

    def signature_bytes(self) -> bytes | None:
        return self._signature

    def parsed_manifest(self) -> Manifest:
        return self.manifest if self.manifest is not None else super().parsed_manifest()

    @abc.abstractmethod
    def fetch_blob(self, blob: BlobRef, dest: Path) -> None: ...

    # push side
    @property
    def blobs(self) -> list[BlobRef]:
        return list(self.manifest.blobs)

    @abc.abstractmethod
    def blob_path(self, blob: BlobRef) -> Path:
        """A local file with the blob's stored (zstd) bytes."""

    @property
    def manifest_digest(self) -> str:
        return manifest_digest(self._manifest_bytes)

    @property
    def platform(self) -> str:
        return platform_key(self.manifest.fingerprint)

    @property
    def stored_size(self) -> int:
        return self.manifest.stored_size + len(self._manifest_bytes)

    def with_signature(self, envelope: bytes | None) -> PackedBundle:
        """The same bundle with ``envelope`` as its signature (shares temporary files with ``self``)."""
        other = copy.copy(self)
        other._signature = envelope
        return other

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class DirPackedBundle(PackedBundle):
    """Blobs as files ``<workdir>/blobs/<hex>.zst`` (what :func:`pack` produces)."""

    def __init__(self, manifest_bytes, signature, description, blob_dir: Path, owned_tmp: Path | None):
        super().__init__(manifest_bytes, signature, description)
        self._blob_dir = blob_dir
        self._owned = owned_tmp

    def blob_path(self, blob: BlobRef) -> Path:
        p = self._blob_dir / (blob.digest.split(":", 1)[1] + ".zst")
        if not p.is_file():
            raise NotFoundError(f"blob {blob.digest} is missing from {self._blob_dir}", key=blob.digest)
        return p

    def fetch_blob(self, blob: BlobRef, dest: Path) -> None:
        shutil.copyfile(self.blob_path(blob), dest)

    def close(self) -> None:
        if self._owned is not None:
            shutil.rmtree(self._owned, ignore_errors=True)
            self._owned = None


# ---------------------------------------------------------------------------------------------------------------
def _hash_file(path: Path, expect_size: int) -> str:
    digest, n = sha256_file(path)
    if n != expect_size:
        raise UsageError(f"{path} changed while packing ({expect_size} bytes listed, {n} read)")
    return digest


def _compress(src: Path, size: int, dest: Path, level: int) -> tuple[str, int]:
    import zstandard

    cctx = zstandard.ZstdCompressor(level=level, write_content_size=True, write_checksum=False)
    h = hashlib.sha256()
    n = 0

    class _HashingWriter(io.RawIOBase):
        def __init__(self, f):
            self.f = f

        def writable(self):
            return True

        def write(self, b):
            nonlocal n
            h.update(b)
            n += len(b)
            return self.f.write(b)

    try:
        with open(src, "rb") as fin, open(dest, "wb") as fout:
            cctx.copy_stream(fin, _HashingWriter(fout), size=size, read_size=_CHUNK, write_size=_CHUNK)  # type: ignore[arg-type]  # baseline (issue 46)
    except BaseException:
        dest.unlink(missing_ok=True)  # no partial blob is left in a caller's workdir
        raise
    return "sha256:" + h.hexdigest(), n


def _check_paths(scan) -> None:
    """Refuse, before hashing anything, a tree whose paths a manifest may not hold (control characters, names too
    long): the installer would refuse the bundle anyway, and such a name is a terminal escape in ``inspect``."""
    for rel in [f.rel for f in scan.files] + [d for d, _ in scan.dirs]:
        try:
            validate_relpath(rel)
        except UnsafePathError as exc:
            raise UnsafePathError(f"cannot pack: {exc}", path=exc.path or rel) from None


def _check_complete(scan) -> None:
    """Refuse a cache whose warm did not complete: installed, its units would replace complete ones."""
    rules = engine_rules.layouts()
    for unit in scan.units:
        folder = scan.unit_dirs.get(unit.path)
        reason = rules.incomplete_reason(scan.kind, folder, unit.rank is not None) if folder is not None else None
        if reason is not None:
            raise IncompleteCacheError(
                f"cannot pack {folder}: its warm did not complete ({reason}); run the warm again", path=unit.path
            )


def pack(
    cache_path: str | os.PathLike,
    *,
    layout: str = "auto",
    sign_key=None,
    workdir: str | os.PathLike | None = None,
    level: int = 3,
    fingerprint: dict | None = None,
) -> DirPackedBundle:
    """Pack the cache at ``cache_path`` (a root, one hash folder or one rank folder), in named phases: the signing
    key (a missing or bad one fails before anything is read or written), the scan (:func:`_scanned`: paths a
    manifest may hold, a complete warm), the blobs (:func:`_blobs`: every file hashed, each unique content
    compressed once), the fingerprint (:func:`_fingerprint`), the manifest and its signature (:func:`_signed`).

    ``sign_key``: an Ed25519 private key object or a path to one. ``workdir``: where the blobs go (default: a
    new temporary folder, deleted by ``close()``). ``fingerprint``: override the environment fingerprint.
    """
    if isinstance(sign_key, (str, os.PathLike)):  # a missing or bad key fails before anything is read or written
        from cachetool.bundle.signing import load_private_key

        sign_key = load_private_key(sign_key)
    scan = _scanned(cache_path, layout)
    owned, blob_dir = _blob_folder(workdir)
    try:
        digests, blobs = _blobs_written(scan, blob_dir, level, owned)
        manifest = Manifest(
            layout=scan.kind,
            files=tuple(FileEntry(f.rel, f.mode, f.size, d) for f, d in zip(scan.files, digests)),
            blobs=tuple(blobs),
            units=tuple(scan.units),
            dirs=tuple(DirEntry(p, m) for p, m in scan.dirs),
            keys=tuple(scan.keys),
            fingerprint=_fingerprint(scan) if fingerprint is None else fingerprint,
            ranks=tuple(scan.ranks),
            save_format=scan.save_format,
        )
        mbytes = manifest.to_bytes()
        return DirPackedBundle(mbytes, _signed(mbytes, sign_key), f"packed {cache_path}", blob_dir, owned)
    except BaseException:
        if owned is not None:
            shutil.rmtree(owned, ignore_errors=True)
        raise


def _scanned(cache_path: str | os.PathLike, layout: str) -> LayoutScan:
    """The cache scanned with ``layout``, refused before anything is hashed where a manifest may not hold a path or
    the warm did not complete."""
    scan = engine_rules.layouts().scan(cache_path, layout)  # type: ignore[arg-type]  # baseline (issue 46)
    _check_paths(scan)
    _check_complete(scan)
    return scan


def _blob_folder(workdir: str | os.PathLike | None) -> tuple[Path | None, Path]:
    """(the temporary folder pack owns and removes, or None for the caller's ``workdir``; the blobs' folder)."""
    if workdir is None:
        owned = Path(tempfile.mkdtemp(prefix="cachetool-pack-"))
        blob_dir = owned / "blobs"
    else:
        owned = None
        blob_dir = Path(workdir) / "blobs"
    blob_dir.mkdir(parents=True, exist_ok=True)
    return owned, blob_dir


def _blobs_written(scan: LayoutScan, blob_dir: Path, level: int, owned: Path | None) -> tuple[list[str], list[BlobRef]]:
    """:func:`_blobs`, where a full file system is one line naming the folder the blobs go to: the temporary
    folder's parent (TMPDIR's; the folder itself is removed) or the caller's ``workdir``."""
    try:
        return _blobs(scan, blob_dir, level)
    except OSError as exc:
        full = disk_full_cause(exc)
        if full is None:
            raise
        where = owned.parent if owned is not None else blob_dir
        hint = "set TMPDIR to a folder with room" if owned is not None else "free space or pass another workdir"
        outcome = f"nothing was written (the compressed blobs go there first): {hint}"
        raise disk_full(full, "pack", where, outcome) from None


def _blobs(scan: LayoutScan, blob_dir: Path, level: int) -> tuple[list[str], list[BlobRef]]:
    """(each file's content digest, in the scan's order; the blobs: each unique content compressed once into
    ``blob_dir``), on a few threads."""
    with ThreadPoolExecutor(_workers()) as ex:
        digests = list(ex.map(lambda f: _hash_file(f.abspath, f.size), scan.files))
    first: dict[str, tuple[Path, int]] = {}
    for f, d in zip(scan.files, digests):
        first.setdefault(d, (f.abspath, f.size))

    def comp(item):
        d, (src, size) = item
        dest = blob_dir / (d.split(":", 1)[1] + ".zst")
        sd, ss = _compress(src, size, dest, level)
        return BlobRef(d, size, sd, ss)

    with ThreadPoolExecutor(_workers()) as ex:
        blobs = list(ex.map(comp, sorted(first.items())))
    return digests, blobs


def _fingerprint(scan: LayoutScan) -> dict:
    """The fingerprint the cache was built under: its compiler factor values where a key folder records them, else
    this machine's facts (read for the CPU: no GPU is probed) with the layout's hints."""
    from cachetool.bundle.fingerprint import fingerprint_from_factors, local_fingerprint

    compiler_values = next(
        (
            k.factors.values("compiler")
            for k in scan.keys
            if k.factors is not None and k.factors.values("compiler") is not None
        ),
        None,
    )
    fp = local_fingerprint(device="cpu")
    fp.update(scan.fingerprint_hints)
    return fingerprint_from_factors(compiler_values, fp)


def _signed(mbytes: bytes, sign_key) -> bytes | None:
    """The DSSE envelope of the manifest's bytes, signed with ``sign_key``; None without a key."""
    signature = None
    if sign_key is not None:
        from cachetool.bundle.signing import load_private_key, sign_manifest

        key = load_private_key(sign_key) if isinstance(sign_key, (str, os.PathLike)) else sign_key
        signature = sign_manifest(mbytes, key)
    return signature
