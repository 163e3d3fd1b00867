"""``file:///dir``: a bundle store in a local (or network-mounted) folder; the embedded default.

Layout (documented in docs/stores.md; every file is written to a temp name in its folder and renamed)::

    {dir}/cachetool-store.json                     {"format": "cachetool-store", "version": 1}
    {dir}/blobs/sha256/<hex>                       zstd bytes of one blob; <hex> = sha256 of these bytes
    {dir}/manifests/sha256/<hex>.json              bundle manifest, canonical JSON; <hex> = its sha256
    {dir}/signatures/sha256/<hex>.dsse.json        DSSE envelope over manifest <hex>
    {dir}/refs/<name>/<tag>.json                   ref index: one entry per platform
    {dir}/refs/<name>/.<tag>.lock                  flock'ed around every change of the ref; never deleted
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
from pathlib import Path
from typing import Iterator

from cachetool.atomic import atomic_write
from cachetool.digests import CHUNK, hexof, sha256_bytes
from cachetool.errors import NotFoundError, StoreError, VerificationError
from cachetool.stores.common import (MAX_MANIFEST, MAX_REF, MAX_SIGNATURE, Counters, index_from_json, index_to_json,
                                      resume_offset, write_bounded)
from cachetool.stores.base import GC_MIN_AGE_S, BlobRef, Capabilities, RefIndex, Store

MARKER = "cachetool-store.json"


class FileStore(Store):
    capabilities = Capabilities(frozenset({"blobs", "manifests", "signatures"}), "lock")

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.url = f"file://{self.root}"
        self.counters = Counters()

    # paths
    def _blob(self, blob: BlobRef) -> Path:
        return self.root / "blobs" / "sha256" / hexof(blob.stored_digest)

    def _manifest(self, digest: str) -> Path:
        return self.root / "manifests" / "sha256" / f"{hexof(digest)}.json"

    def _signature(self, digest: str) -> Path:
        return self.root / "signatures" / "sha256" / f"{hexof(digest)}.dsse.json"

    def _ref(self, name: str, tag: str) -> Path:
        return self.root / "refs" / name / f"{tag}.json"

    def _ensure(self) -> None:
        try:
            if not (self.root / MARKER).exists():
                atomic_write(self.root / MARKER, json.dumps({"format": "cachetool-store", "version": 1}).encode())
        except OSError as exc:
            raise StoreError(f"cannot write store {self.url}: {exc.strerror or exc}") from None

    def _require_root(self) -> None:
        if not self.root.is_dir():
            raise NotFoundError(f"store {self.url} does not exist (no such folder)")

    def _inside(self, path: Path, doing: str) -> str:
        """``path`` with links resolved, if that lies inside the store; else a VerificationError. Reads, writes and
        deletes go through this: a folder or object planted as a link never makes the store touch other files."""
        root = os.path.realpath(self.root)
        real = os.path.realpath(path)
        if os.path.commonpath([root, real]) != root:
            raise VerificationError(f"{os.path.relpath(path, self.root)} in store {self.url} points outside the store; "
                                    f"refusing to {doing} it")
        return real

    def _open_read(self, path: Path):
        """Open ``path`` for reading only if it is a regular file that lies inside the store once links are
        resolved: an object planted as a symlink to /etc/shadow or /dev/zero, or a fifo, is refused, not read.
        Raises FileNotFoundError when it is missing."""
        real = self._inside(path, "read")
        rel = os.path.relpath(path, self.root)
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        f = os.fdopen(fd, "rb")
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            f.close()
            raise VerificationError(f"{rel} in store {self.url} is not a regular file; refusing to read it")
        return f

    def _read(self, path: Path, limit: int) -> bytes:
        with self._open_read(path) as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise VerificationError(f"{os.path.relpath(path, self.root)} in store {self.url} is larger than "
                                    f"{limit >> 20} MiB")
        return data

    def _write(self, path: Path, data: bytes | None = None, src: Path | None = None) -> None:
        self._ensure()
        self._inside(path.parent, "write")  # the object itself is replaced by a rename, never followed
        try:
            atomic_write(path, data, src=src)
        except OSError as exc:
            raise StoreError(f"cannot write {path} in store {self.url}: {exc.strerror or exc}") from None

    # blobs
    def has_blob(self, blob: BlobRef) -> bool:
        try:
            st = os.lstat(self._blob(blob))
        except FileNotFoundError:
            return False
        # A link or special file planted in place of a blob is not "there": the upload replaces it.
        return stat.S_ISREG(st.st_mode) and st.st_size == blob.stored_size

    def put_blob(self, blob: BlobRef, stored_bytes_path: Path) -> None:
        self._write(self._blob(blob), src=Path(stored_bytes_path))
        self.counters.up(blob.stored_size)

    def get_blob(self, blob: BlobRef, dest: Path) -> None:
        self._require_root()
        src = self._blob(blob)
        dest = Path(dest)
        offset = resume_offset(dest, blob.stored_size)
        try:
            with self._open_read(src) as f, open(dest, "ab" if offset else "wb") as out:
                if offset:
                    self.counters.resumed()
                    f.seek(offset)
                write_bounded(iter(lambda: f.read(CHUNK), b""), out, blob.stored_size - offset,
                              f"blob {blob.stored_digest[:19]} in store {self.url}", self.counters.down)
        except FileNotFoundError:
            raise NotFoundError(f"blob {blob.stored_digest[:19]} is missing from store {self.url}", store=self.url,
                                key=blob.stored_digest) from None

    # manifests and signatures
    def put_manifest(self, manifest_bytes: bytes, blobs: list[BlobRef]) -> str:
        digest = sha256_bytes(manifest_bytes)
        p = self._manifest(digest)
        if not p.exists():
            self._write(p, manifest_bytes)
            self.counters.up(len(manifest_bytes))
        return digest

    def get_manifest(self, manifest_digest: str) -> bytes:
        self._require_root()
        try:
            data = self._read(self._manifest(manifest_digest), MAX_MANIFEST)
        except FileNotFoundError:
            raise NotFoundError(f"manifest {manifest_digest[:19]} is missing from store {self.url}", store=self.url,
                                key=manifest_digest) from None
        self.counters.down(len(data))
        return data

    def put_signature(self, manifest_digest: str, envelope: bytes) -> None:
        self._write(self._signature(manifest_digest), envelope)
        self.counters.up(len(envelope))

    def get_signature(self, manifest_digest: str) -> bytes | None:
        try:
            data = self._read(self._signature(manifest_digest), MAX_SIGNATURE)
        except FileNotFoundError:
            return None
        self.counters.down(len(data))
        return data

    # refs
    def put_ref(self, index: RefIndex) -> None:
        self._write(self._ref(index.name, index.tag), index_to_json(index))

    @contextlib.contextmanager
    def _ref_lock(self, name: str, tag: str):
        """An exclusive ``flock`` on ``refs/<name>/.<tag>.lock``, around every change of the ref. The lock file is
        never deleted: a writer that unlinked it would let the next one lock a new file while a third still holds
        the old one, and two updates would run at once."""
        import fcntl

        self._ensure()
        lock = self._ref(name, tag).with_name(f".{tag}.lock")
        self._inside(lock.parent.parent, "write")
        lock.parent.mkdir(parents=True, exist_ok=True)
        self._inside(lock, "write")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def update_ref(self, name, tag, update):
        """Read-modify-write under the tag's lock: concurrent pushes and removals never drop each other's entries."""
        with self._ref_lock(name, tag):
            return self.read_modify_write_ref(name, tag, update, self._unlink_ref)

    def get_ref(self, name: str, tag: str) -> RefIndex:
        self._require_root()
        p = self._ref(name, tag)
        try:
            data = self._read(p, MAX_REF)
        except FileNotFoundError:
            known = sorted(q.stem for q in (self.root / "refs" / name).glob("*.json")) if (self.root / "refs" / name).is_dir() else []
            hint = f" (tags: {', '.join(known[:8])})" if known else f" (no bundle named {name!r})"
            raise NotFoundError(f"{self.url}/{name}:{tag} not found{hint}", store=self.url, ref=f"{name}:{tag}") from None
        return index_from_json(data, f"{self.url}/{name}:{tag}")

    def list_refs(self) -> Iterator[RefIndex]:
        self._require_root()
        refs = self.root / "refs"
        if not refs.is_dir():
            return
        for d in sorted(refs.iterdir()):
            if not d.is_dir():
                continue
            for p in sorted(d.glob("*.json")):
                if p.name.startswith("."):
                    continue
                yield index_from_json(self._read(p, MAX_REF), f"{self.url}/{d.name}:{p.stem}")

    def delete_ref(self, name: str, tag: str) -> None:
        self._require_root()
        if not os.path.lexists(self._ref(name, tag)):  # no lock file for a tag that never existed
            raise NotFoundError(f"{self.url}/{name}:{tag} not found", store=self.url, ref=f"{name}:{tag}")
        with self._ref_lock(name, tag):
            self._unlink_ref(name, tag)

    def _unlink_ref(self, name: str, tag: str) -> None:
        p = self._ref(name, tag)
        self._inside(p, "delete")
        try:
            p.unlink()
        except FileNotFoundError:
            raise NotFoundError(f"{self.url}/{name}:{tag} not found", store=self.url, ref=f"{name}:{tag}") from None

    def gc(self, dry_run: bool = False, older_than: float = GC_MIN_AGE_S) -> list[str]:
        from cachetool.stores.gc import reachable

        self._require_root()
        manifests, blobs = reachable(self)
        cutoff = time.time() - older_than
        out: list[str] = []
        for kind, keep in (("blobs", blobs), ("manifests", manifests), ("signatures", manifests)):
            folder = self.root / kind / "sha256"
            if not folder.is_dir():
                continue
            self._inside(folder, "collect")
            for p in sorted(folder.iterdir()):
                hexd = p.name.split(".", 1)[0]
                stale_tmp = p.name.startswith(".") and p.name.endswith(".tmp")
                if not stale_tmp and hexd in keep:
                    continue
                try:
                    if p.stat().st_mtime > cutoff:
                        continue
                except FileNotFoundError:
                    continue
                out.append(f"{kind}/sha256/{p.name}")
                if not dry_run:
                    try:
                        p.unlink()
                    except FileNotFoundError:
                        pass
        return out
