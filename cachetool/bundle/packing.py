"""Packing a cache tree into a bundle, and the single-file ``.ctb`` form.

:func:`pack` scans a cache with a layout, hashes every file, compresses each *unique* content once with zstd
into a work folder and builds the manifest (and a signature, given a key). The result is a
:class:`PackedBundle`: a :class:`cachetool.bundle.source.BundleSource` (so it installs directly) that also exposes
what a store push uploads (blob refs and a local path of each blob's stored bytes).

``.ctb`` is an uncompressed POSIX tar (blobs are already zstd) holding, in this order::

    manifest.json                  the manifest's canonical bytes (exactly what is signed)
    signature.dsse.json            the DSSE envelope (absent when unsigned)
    blobs/sha256/<hex>.zst         one per unique content; <hex> = sha256 of the *uncompressed* content

The reader trusts nothing: only regular members with exactly these names, each at most once, inside the file's
length; every byte is verified later against the (signed) manifest by the installer.
"""

from __future__ import annotations

import abc
import copy
import hashlib
import io
import os
import re
import shutil
import tarfile
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cachetool.errors import BundleFormatError, IncompleteCacheError, NotFoundError, UnsafePathError, UsageError
from cachetool.engines.layouts import incomplete_reason, scan as scan_layout
from cachetool.bundle.paths import validate_relpath
from cachetool.bundle.manifest import DirEntry, FileEntry, Manifest, manifest_digest, platform_key
from cachetool.bundle.source import BundleSource
from cachetool.atomic import atomic_file
from cachetool.digests import CHUNK as _CHUNK, BlobRef, sha256_file

CTB_MANIFEST = "manifest.json"
CTB_SIGNATURE = "signature.dsse.json"
CTB_BLOB_RE = re.compile(r"^blobs/sha256/([0-9a-f]{64})\.zst$")



def _workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


# ---------------------------------------------------------------------------------------------------------------
class PackedBundle(BundleSource):
    """A bundle available locally: from :func:`pack` (blobs in a work folder) or :func:`open_ctb`.

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

    def with_signature(self, envelope: bytes | None) -> "PackedBundle":
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


class CtbBundle(PackedBundle):
    """A ``.ctb`` file, read defensively. Blobs are read at their offsets; :meth:`blob_path` extracts lazily."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._members: dict[str, tuple[int, int]] = {}  # hex -> (offset, size)
        self._tmp: Path | None = None
        self._lock = threading.Lock()
        manifest, signature = self._read_index()
        super().__init__(manifest, signature, f"bundle file {self.path}")
        for b in self.manifest.blobs:
            if b.digest.split(":", 1)[1] not in self._members:
                raise BundleFormatError(f"{self.path}: blob {b.digest} is listed in the manifest but missing",
                                        key=b.digest)

    def _read_index(self) -> tuple[bytes, bytes | None]:
        p = self.path
        try:
            total = p.stat().st_size
            f = open(p, "rb")
            if total % 512:
                f.close()
                raise BundleFormatError(f"{p} is truncated ({total} bytes is not a whole number of tar blocks)")
        except FileNotFoundError:
            raise NotFoundError(f"bundle file {p} does not exist") from None
        except OSError as exc:
            raise UsageError(f"cannot read bundle file {p}: {exc.strerror}") from None
        manifest = signature = None
        seen: set[str] = set()
        with f:
            try:
                tf = tarfile.open(fileobj=f, mode="r:")
                members = tf.getmembers()
            except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
                raise BundleFormatError(f"{p} is not a readable .ctb (truncated or not a tar: {exc})") from None
            if not members:
                raise BundleFormatError(f"{p} is an empty .ctb")
            for m in members:
                name = m.name
                if name in seen:
                    raise BundleFormatError(f"{p}: member {name!r} appears twice")
                seen.add(name)
                if not m.isreg():
                    kind = "link" if (m.issym() or m.islnk()) else "special file" if (m.isdev() or m.isfifo()) else "folder"
                    raise BundleFormatError(f"{p}: member {name!r} is a {kind}; a .ctb holds regular files only")
                if m.offset_data + m.size > total:
                    raise BundleFormatError(f"{p} is truncated (member {name!r} runs past the end of the file)")
                if name in (CTB_MANIFEST, CTB_SIGNATURE):
                    if m.size > 512 << 20:
                        raise BundleFormatError(f"{p}: {name} is larger than 512 MiB")
                    f.seek(m.offset_data)
                    data = f.read(m.size)
                    if len(data) != m.size:
                        raise BundleFormatError(f"{p} is truncated (in {name})")
                    if name == CTB_MANIFEST:
                        manifest = data
                    else:
                        signature = data
                    continue
                mm = CTB_BLOB_RE.match(name)
                if not mm:
                    raise BundleFormatError(f"{p}: unexpected member {name!r}")
                self._members[mm.group(1)] = (m.offset_data, m.size)
            # The tar end-of-archive marker (two zero blocks) must be there too: a cut file is refused.
            end = max(m.offset_data + ((m.size + 511) // 512) * 512 for m in members)
            if total < end + 1024:
                raise BundleFormatError(f"{p} is truncated (no end-of-archive marker)")
        if manifest is None:
            raise BundleFormatError(f"{p} has no {CTB_MANIFEST}")
        return manifest, signature

    def fetch_blob(self, blob: BlobRef, dest: Path) -> None:
        hexd = blob.digest.split(":", 1)[1]
        if hexd not in self._members:
            raise NotFoundError(f"{self.path}: no blob {blob.digest}", key=blob.digest)
        offset, size = self._members[hexd]
        with open(self.path, "rb") as f, open(dest, "wb") as out:
            f.seek(offset)
            left = size
            while left:
                chunk = f.read(min(_CHUNK, left))
                if not chunk:
                    raise BundleFormatError(f"{self.path} is truncated (in blob {blob.digest})", key=blob.digest)
                out.write(chunk)
                left -= len(chunk)

    def blob_path(self, blob: BlobRef) -> Path:
        with self._lock:
            if self._tmp is None:
                self._tmp = Path(tempfile.mkdtemp(prefix="cachetool-ctb-"))
        dest = self._tmp / (blob.digest.split(":", 1)[1] + ".zst")
        if not dest.exists():
            part = dest.with_suffix(f".part{threading.get_ident()}")
            self.fetch_blob(blob, part)
            os.replace(part, dest)
        return dest

    def close(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def open_ctb(path: str | os.PathLike) -> CtbBundle:
    """Open a ``.ctb`` file. Nothing is trusted yet: verify with :func:`cachetool.bundle.signing.verify_envelope`."""
    return CtbBundle(Path(path))


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

    with open(src, "rb") as fin, open(dest, "wb") as fout:
        cctx.copy_stream(fin, _HashingWriter(fout), size=size, read_size=_CHUNK, write_size=_CHUNK)
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
    for unit in scan.units:
        folder = scan.unit_dirs.get(unit.path)
        reason = incomplete_reason(scan.kind, folder, unit.rank is not None) if folder is not None else None
        if reason is not None:
            raise IncompleteCacheError(f"cannot pack {folder}: its warm did not complete ({reason}); run the warm "
                                       "again", path=unit.path)


def pack(cache_path: str | os.PathLike, *, layout: str = "auto", sign_key=None, workdir: str | os.PathLike | None = None,
         level: int = 3, fingerprint: dict | None = None) -> DirPackedBundle:
    """Pack the cache at ``cache_path`` (a root, one hash folder or one rank folder).

    ``sign_key``: an Ed25519 private key object or a path to one. ``workdir``: where the blobs go (default: a
    new temporary folder, deleted by ``close()``). ``fingerprint``: override the environment fingerprint.
    """
    from cachetool.bundle.fingerprint import fingerprint_from_factors, local_fingerprint

    if isinstance(sign_key, (str, os.PathLike)):  # a missing or bad key fails before anything is read or written
        from cachetool.bundle.signing import load_private_key

        sign_key = load_private_key(sign_key)
    scan = scan_layout(cache_path, layout)
    _check_paths(scan)
    _check_complete(scan)
    if workdir is None:
        owned = Path(tempfile.mkdtemp(prefix="cachetool-pack-"))
        blob_dir = owned / "blobs"
    else:
        owned = None
        blob_dir = Path(workdir) / "blobs"
    blob_dir.mkdir(parents=True, exist_ok=True)
    try:
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

        if fingerprint is None:
            compiler_values = next((k.factors.values("compiler") for k in scan.keys
                                    if k.factors is not None and k.factors.values("compiler") is not None), None)
            fp = local_fingerprint(device="cpu")
            fp.update(scan.fingerprint_hints)
            fingerprint = fingerprint_from_factors(compiler_values, fp)
        manifest = Manifest(
            layout=scan.kind,
            files=tuple(FileEntry(f.rel, f.mode, f.size, d) for f, d in zip(scan.files, digests)),
            blobs=tuple(blobs),
            units=tuple(scan.units),
            dirs=tuple(DirEntry(p, m) for p, m in scan.dirs),
            keys=tuple(scan.keys),
            fingerprint=fingerprint,
            ranks=tuple(scan.ranks),
            save_format=scan.save_format,
        )
        mbytes = manifest.to_bytes()
        signature = None
        if sign_key is not None:
            from cachetool.bundle.signing import load_private_key, sign_manifest

            key = load_private_key(sign_key) if isinstance(sign_key, (str, os.PathLike)) else sign_key
            signature = sign_manifest(mbytes, key)
        return DirPackedBundle(mbytes, signature, f"packed {cache_path}", blob_dir, owned)
    except BaseException:
        if owned is not None:
            shutil.rmtree(owned, ignore_errors=True)
        raise


def _tarinfo(name: str, size: int) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.size = size
    ti.mode = 0o644
    ti.mtime = 0
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    ti.type = tarfile.REGTYPE
    return ti


def write_ctb(bundle: PackedBundle, out_path: str | os.PathLike) -> Path:
    """Write the single-file form of ``bundle`` to ``out_path`` (temp file + rename: never a half file)."""
    out = Path(out_path)
    with atomic_file(out) as f:
        with tarfile.open(fileobj=f, mode="w:", format=tarfile.USTAR_FORMAT) as tf:
            m = bundle.manifest_bytes()
            tf.addfile(_tarinfo(CTB_MANIFEST, len(m)), io.BytesIO(m))
            s = bundle.signature_bytes()
            if s is not None:
                tf.addfile(_tarinfo(CTB_SIGNATURE, len(s)), io.BytesIO(s))
            for b in sorted(bundle.blobs, key=lambda b: b.digest):
                p = bundle.blob_path(b)
                size = p.stat().st_size
                with open(p, "rb") as bf:
                    tf.addfile(_tarinfo(f"blobs/sha256/{b.digest.split(':', 1)[1]}.zst", size), bf)
    return out
