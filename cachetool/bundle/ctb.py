"""The single-file form of a bundle, the ``.ctb``: an uncompressed POSIX tar (blobs are already zstd) holding, in
this order::

    manifest.json                  the manifest's canonical bytes (exactly what is signed)
    signature.dsse.json            the DSSE envelope (absent when unsigned)
    blobs/sha256/<hex>.zst         one per unique content; <hex> = sha256 of the *uncompressed* content

:func:`write_ctb` writes one from any :class:`~cachetool.bundle.packing.PackedBundle`; :func:`open_ctb` reads one
as a :class:`CtbBundle`. The reader trusts nothing: only regular members with exactly these names, each at most
once, inside the file's length; every byte is verified later against the (signed) manifest by the installer.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import tarfile
import tempfile
import threading
from pathlib import Path

from cachetool.atomic import atomic_file
from cachetool.bundle.packing import PackedBundle
from cachetool.bundle.ustar import plain_members
from cachetool.digests import CHUNK as _CHUNK, BlobRef
from cachetool.errors import BundleFormatError, NotFoundError, UsageError, disk_full, disk_full_cause

__all__ = ["CTB_BLOB_RE", "CTB_MANIFEST", "CTB_SIGNATURE", "CtbBundle", "open_ctb", "write_ctb"]

CTB_MANIFEST = "manifest.json"
CTB_SIGNATURE = "signature.dsse.json"
CTB_BLOB_RE = re.compile(r"^blobs/sha256/([0-9a-f]{64})\.zst$")


class CtbBundle(PackedBundle):
    """A ``.ctb`` file, read defensively. Blobs are read at their offsets; :meth:`blob_path` extracts lazily."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._members: dict[str, tuple[int, int]] = {}  # hex -> (offset, size)
        self._tmp: Path | None = None
        self._fd: int | None = None  # read_blob's, opened on first use
        self._lock = threading.Lock()
        manifest, signature = self._read_index()
        super().__init__(manifest, signature, f"bundle file {self.path}")
        for b in self.manifest.blobs:
            if b.digest.split(":", 1)[1] not in self._members:
                raise BundleFormatError(
                    f"{self.path}: blob {b.digest} is listed in the manifest but missing", key=b.digest
                )

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
            members = plain_members(f.fileno(), total)  # None: not the plain form write_ctb writes; tarfile reads it
            if members is None:
                members = _tar_members(f, p)
            if not members:
                raise BundleFormatError(f"{p} is an empty .ctb")
            for name, offset, size in members:
                if name in seen:
                    raise BundleFormatError(f"{p}: member {name!r} appears twice")
                seen.add(name)
                if offset + size > total:
                    raise BundleFormatError(f"{p} is truncated (member {name!r} runs past the end of the file)")
                if name in (CTB_MANIFEST, CTB_SIGNATURE):
                    if size > 512 << 20:
                        raise BundleFormatError(f"{p}: {name} is larger than 512 MiB")
                    f.seek(offset)
                    data = f.read(size)
                    if len(data) != size:
                        raise BundleFormatError(f"{p} is truncated (in {name})")
                    if name == CTB_MANIFEST:
                        manifest = data
                    else:
                        signature = data
                    continue
                mm = CTB_BLOB_RE.match(name)
                if not mm:
                    raise BundleFormatError(f"{p}: unexpected member {name!r}")
                self._members[mm.group(1)] = (offset, size)
            # The tar end-of-archive marker (two zero blocks) must be there too: a cut file is refused.
            end = max(offset + ((size + 511) // 512) * 512 for _name, offset, size in members)
            if total < end + 1024:
                raise BundleFormatError(f"{p} is truncated (no end-of-archive marker)")
        if manifest is None:
            raise BundleFormatError(f"{p} has no {CTB_MANIFEST}")
        return manifest, signature

    def _member(self, blob: BlobRef) -> tuple[int, int]:
        """(offset, size) of ``blob``'s member."""
        hexd = blob.digest.split(":", 1)[1]
        if hexd not in self._members:
            raise NotFoundError(f"{self.path}: no blob {blob.digest}", key=blob.digest)
        return self._members[hexd]

    def read_blob(self, blob: BlobRef, scratch_dir: Path) -> bytes:
        """One ``pread`` at the member's offset through a descriptor opened once (the installer's small blobs)."""
        offset, size = self._member(blob)
        with self._lock:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            fd = self._fd
        want = min(size, blob.stored_size + 1)  # a member larger than the manifest says fails its check
        data = os.pread(fd, want, offset)
        if len(data) != want:
            raise BundleFormatError(f"{self.path} is truncated (in blob {blob.digest})", key=blob.digest)
        return data

    def fetch_blob(self, blob: BlobRef, dest: Path) -> None:
        offset, size = self._member(blob)
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
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _tar_members(f, p: Path) -> list[tuple[str, int, int]]:
    """(name, data offset, size) of each member, read by tarfile; a member that is not a regular file is refused."""
    members = []
    try:
        tf = tarfile.open(fileobj=f, mode="r:")
        while (m := tf.next()) is not None:
            if m.size < 0:  # tarfile takes a signed size and steps back onto this header: it would read forever
                raise BundleFormatError(f"{p}: member {m.name!r} has a negative size ({m.size})")
            members.append(m)
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise BundleFormatError(f"{p} is not a readable .ctb (truncated or not a tar: {exc})") from None
    for m in members:
        if not m.isreg():
            kind = "link" if (m.issym() or m.islnk()) else "special file" if (m.isdev() or m.isfifo()) else "folder"
            raise BundleFormatError(f"{p}: member {m.name!r} is a {kind}; a .ctb holds regular files only")
    return [(m.name, m.offset_data, m.size) for m in members]


def open_ctb(path: str | os.PathLike) -> CtbBundle:
    """Open a ``.ctb`` file. Nothing is trusted yet: verify with :func:`cachetool.bundle.signing.verify_envelope`."""
    return CtbBundle(Path(path))


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
    """Write the single-file form of ``bundle`` to ``out_path`` (temp file + rename: never a half file); a full
    file system is one line naming ``out_path`` (:class:`~cachetool.errors.DiskFullError`, exit 9)."""
    out = Path(out_path)
    try:
        _write_members(bundle, out)
    except OSError as exc:
        full = disk_full_cause(exc)
        if full is None:
            raise
        raise disk_full(
            full,
            f"write {out}",
            out.absolute().parent,
            "nothing was written (the partial file is removed): free space or write the bundle elsewhere",
            path=str(out),
        ) from None
    return out


def _write_members(bundle: PackedBundle, out: Path) -> None:
    """The .ctb's members in their order, through a temporary file that becomes ``out`` whole."""
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
