"""``file:///dir``: a bundle store in a local (or network-mounted) folder; the embedded default.

The keys of :mod:`cachetool.stores.object_store` are paths under ``dir``, plus ``cachetool-store.json``
(``{"format": "cachetool-store", "version": 1}``, written with the first object). Every file is written to a temp
name in its folder, fsynced and renamed: a reader sees a whole object or none, a crash leaves at most a
``.<name>.*.tmp`` file (gc removes stale ones).

A conditional put holds an exclusive ``flock`` on ``refs/<name>/.<tag>.lock`` (the path cachetool has always
locked) while it compares and writes, and deletes the lock file before it lets go: a writer that was waiting on
the deleted file sees that it is no longer the one at that path and locks anew, so no lock file is left behind
and two writers never hold different files at once.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from cachetool.atomic import atomic_write
from cachetool.digests import CHUNK
from cachetool.errors import (
    CachetoolError,
    NotFoundError,
    OversizeBlobError,
    StoreError,
    VerificationError,
    disk_full,
    disk_full_cause,
)
from cachetool.stores.base import BlobRef, Capabilities, TransferCounters
from cachetool.stores.common import resume_offset, write_bounded
from cachetool.stores.object_store import ObjectStore, blob_key
from cachetool.stores.objects import ObjectBackend, ObjectInfo, StoredObject

MARKER = "cachetool-store.json"
_PROC_FD = Path("/proc/self/fd")  # where Linux names the real path of an open file
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_REOPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)  # of /proc/self/fd/N: a link to follow

LOCK_ATTEMPTS = 1000  # each retry means another writer deleted the lock file we waited on: it moved on


def _under(root: str, real: str) -> bool:
    return real == root or real.startswith(root.rstrip("/") + "/")


@functools.lru_cache(maxsize=1)
def _has_proc_fd() -> bool:
    return _PROC_FD.is_dir() and hasattr(os, "O_PATH")


class FileBackend(ObjectBackend):
    ref_update = "lock"
    conditional_delete = True

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.url = f"file://{self.root}"
        self.counters = TransferCounters()
        self._real_root: str | None = None  # the store folder's real path, resolved at the first read

    # confinement: no read, write or delete leaves the folder, whatever links are planted in it
    def _inside(self, path: Path, doing: str) -> str:
        """``path`` with links resolved, if that lies inside the store; else a VerificationError."""
        real = os.path.realpath(path)
        if not _under(os.path.realpath(self.root), real):
            raise self._outside(path, doing)
        return real

    def _outside(self, path: Path, doing: str) -> VerificationError:
        rel = os.path.relpath(path, self.root)
        return VerificationError(
            f"{rel} in store {self.url} points outside the store; refusing to {doing} it", store=self.url, key=rel
        )

    def _open_fd(self, path: Path) -> int:
        """Open ``path`` only if it is a regular file inside the store once links are resolved: an object planted as
        a link to /etc/shadow or /dev/zero, or a fifo, is refused, not read. FileNotFoundError when missing."""
        fd = self._open_inside(path) if _has_proc_fd() else os.open(self._inside(path, "read"), _READ_FLAGS)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            rel = os.path.relpath(path, self.root)
            raise VerificationError(
                f"{rel} in store {self.url} is not a regular file; refusing to read it", store=self.url, key=rel
            )
        return fd

    def _open_read(self, path: Path):
        return os.fdopen(self._open_fd(path), "rb")

    def _open_inside(self, path: Path) -> int:
        """:meth:`_inside` and the open in one resolution, by the kernel: an ``O_PATH`` handle (it opens nothing, so
        no device is touched), whose real path ``/proc/self/fd`` names; it is opened for reading only when that lies
        inside the store. Three system calls where resolving in Python took an ``lstat`` per component."""
        handle = os.open(path, os.O_PATH | getattr(os, "O_CLOEXEC", 0))
        try:
            via = f"{_PROC_FD}/{handle}"
            if self._real_root is None:
                self._real_root = os.path.realpath(self.root)
            if not _under(self._real_root, os.readlink(via)):
                raise self._outside(path, "read")
            return os.open(via, _REOPEN_FLAGS)
        finally:
            os.close(handle)

    def _ensure_marker(self) -> None:
        try:
            if not (self.root / MARKER).exists():
                atomic_write(self.root / MARKER, json.dumps({"format": "cachetool-store", "version": 1}).encode())
        except OSError as exc:
            raise self._write_error(exc, f"cannot write store {self.url}", MARKER) from None

    def _write(self, path: Path, data: bytes | None = None, src: Path | None = None) -> None:
        self._ensure_marker()
        self._inside(path.parent, "write")  # the object itself is replaced by a rename, never followed
        key = os.path.relpath(path, self.root)
        try:
            atomic_write(path, data, src=src)
        except OSError as exc:
            raise self._write_error(exc, f"cannot write {path} in store {self.url}", key) from None

    def _write_error(self, exc: OSError, doing: str, key: str) -> CachetoolError:
        """A write the store folder's file system refused, as one line: a full one is a
        :class:`~cachetool.errors.DiskFullError` (exit 9) naming the folder, anything else a StoreError."""
        fields = {"store": self.url, "key": key}
        if disk_full_cause(exc) is not None:
            short = key if len(key) <= 40 else key[:25] + "…"
            return disk_full(exc, f"write {short}", self.root, "free space in the store folder", **fields)
        return StoreError(f"{doing}: {exc.strerror or exc}", **fields)

    # the operations
    def check(self) -> None:
        if not self.root.is_dir():
            raise NotFoundError(f"store {self.url} does not exist (no such folder)", store=self.url)

    def stat(self, key: str) -> ObjectInfo | None:
        try:
            st = os.lstat(self.root / key)
        except (FileNotFoundError, NotADirectoryError):
            return None
        # A link or special file planted in place of an object is not "there": an upload replaces it.
        return ObjectInfo(key, st.st_size, st.st_mtime) if stat.S_ISREG(st.st_mode) else None

    def get(self, key: str, limit: int, what: str) -> StoredObject | None:
        self.check()
        path = self.root / key
        try:
            with self._open_read(path) as f:
                data = f.read(limit + 1)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if len(data) > limit:
            raise VerificationError(
                f"{key} in store {self.url} is larger than {limit >> 20} MiB", store=self.url, key=key
            )
        self.counters.down(len(data))
        return StoredObject(data, hashlib.sha256(data).hexdigest())

    def download(self, key: str, size: int, dest: Path, what: str, missing: str) -> None:
        self.check()
        offset = resume_offset(dest, size)
        try:
            with self._open_read(self.root / key) as f, open(dest, "ab" if offset else "wb") as out:
                if offset:
                    self.counters.resumed()
                    f.seek(offset)
                write_bounded(
                    iter(lambda: f.read(CHUNK), b""),
                    out,
                    size - offset,
                    what,
                    self.counters.down,
                    {"store": self.url, "key": key},
                )
        except FileNotFoundError:
            raise NotFoundError(missing, store=self.url, key=key) from None

    def read(self, key: str, size: int, what: str, missing: str) -> bytes:
        """The object's ``size`` bytes in memory, refused past them like :meth:`download`."""
        self.check()
        try:
            fd = self._open_fd(self.root / key)
        except FileNotFoundError:
            raise NotFoundError(missing, store=self.url, key=key) from None
        chunks: list[bytes] = []
        n = 0
        try:
            while n <= size:  # one byte past ``size`` is enough to refuse it
                chunk = os.read(fd, size + 1 - n)
                if not chunk:
                    break
                chunks.append(chunk)
                n += len(chunk)
        finally:
            os.close(fd)
        data = b"".join(chunks)
        if len(data) > size:
            raise OversizeBlobError(
                f"{what}: the store sends more bytes than the manifest declares", store=self.url, key=key
            )
        self.counters.down(len(data))
        return data

    def put(self, key: str, what: str, *, data: bytes | None = None, src: Path | None = None) -> None:
        self._write(self.root / key, data, src)
        self.counters.up(len(data) if data is not None else os.stat(src).st_size)  # type: ignore[arg-type]  # baseline (issue 46)

    def put_if(self, key: str, data: bytes | None, version: str | None, what: str) -> bool:
        path = self.root / key
        with self._locked(path):
            try:
                with self._open_read(path) as f:
                    h = hashlib.sha256()
                    for chunk in iter(lambda: f.read(CHUNK), b""):
                        h.update(chunk)
                    current = h.hexdigest()
            except FileNotFoundError:
                current = None
            if current != version:
                return False
            if data is not None:
                self.put(key, what, data=data)
            elif current is not None:
                self._inside(path, "delete")
                path.unlink()
        return True

    @contextlib.contextmanager
    def _locked(self, path: Path):
        """An exclusive ``flock`` on ``.<stem>.lock`` beside ``path``; the file is deleted before it is let go."""
        import fcntl

        lock = path.with_name(f".{path.stem}.lock")
        self._ensure_marker()
        self._inside(lock.parent.parent, "write")
        for _ in range(LOCK_ATTEMPTS):
            try:
                lock.parent.mkdir(parents=True, exist_ok=True)
                self._inside(lock, "write")
                fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
            except FileNotFoundError:
                continue  # the folder was removed with the last lock in it: make it again
            except OSError as exc:
                raise self._write_error(
                    exc, f"cannot lock {lock} in store {self.url}", os.path.relpath(lock, self.root)
                ) from None
            fcntl.flock(fd, fcntl.LOCK_EX)
            if _same_file(fd, lock):
                break
            os.close(fd)  # locked a file another writer has deleted meanwhile: lock the one at the path now
        else:
            raise StoreError(
                f"cannot lock {lock} in store {self.url}: it kept being replaced",
                store=self.url,
                key=os.path.relpath(lock, self.root),
            )
        try:
            yield
        finally:
            try:
                os.unlink(lock)  # while still holding it: see _same_file
            except FileNotFoundError:
                pass
            os.close(fd)
            _remove_if_empty(lock.parent)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        self.check()
        top = self.root / prefix
        if not top.is_dir():
            return
        self._inside(top, "collect")  # a folder planted as a link is never walked (nor emptied by gc)
        out = []
        for folder, dirs, files in os.walk(top):
            dirs.sort()
            rel = Path(folder).relative_to(self.root).as_posix()
            for name in files:
                try:
                    st = os.lstat(os.path.join(folder, name))
                except FileNotFoundError:
                    continue
                out.append(ObjectInfo(f"{rel}/{name}", st.st_size, st.st_mtime))
        yield from sorted(out, key=lambda i: i.key)

    def delete(self, keys: Iterable[str], what: str) -> None:
        for key in keys:
            path = self.root / key
            self._inside(path.parent, "delete")
            if path.name.endswith(".lock"):
                _delete_lock(path)
                continue
            try:
                path.unlink()
            except FileNotFoundError:
                pass


def _same_file(fd: int, path: Path) -> bool:
    """Whether the locked ``fd`` is still the file at ``path``: a writer deletes the lock file while it holds it,
    so one that waited on it learns here that it must lock the new one."""
    try:
        a, b = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _delete_lock(lock: Path) -> None:
    """Delete a lock file left behind (by a crash, or by an older cachetool, which kept them) unless an update
    holds it; holding it while deleting, as every writer does."""
    import fcntl

    try:
        fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if _same_file(fd, lock):
            os.unlink(lock)
    except BlockingIOError:
        pass  # an update in flight
    finally:
        os.close(fd)
    _remove_if_empty(lock.parent)


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass  # not empty (other tags), or gone


class FileStore(ObjectStore):
    """The file store: an :class:`ObjectStore` on a :class:`FileBackend`."""

    capabilities = Capabilities(
        frozenset({"blobs", "manifests", "signatures"}), FileBackend.ref_update, local_reads=True
    )

    def __init__(self, root: str | os.PathLike):
        super().__init__(FileBackend(root))
        self.root = self.backend.root  # type: ignore[attr-defined]  # baseline (issue 46)

    def read_blob(self, blob: BlobRef, scratch_dir: Path) -> bytes:
        """Read in place: no file is written for a small blob."""
        return self.backend.read(blob_key(blob), blob.stored_size, *self.blob_words(blob))  # type: ignore[attr-defined]  # baseline (issue 46)
