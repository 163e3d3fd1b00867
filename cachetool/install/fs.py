"""Safe file-system primitives of the installer: folders opened one component at a time relative to a parent fd
with ``O_NOFOLLOW`` (a symlink planted in the cache root is refused, never followed), files created ``O_EXCL``, the
cache root opened and locked (``flock`` on the folder itself: no lock file is left behind), atomic exchange
(``renameat2(RENAME_EXCHANGE)``), durability (one ``syncfs`` of the staged tree, an ``fsync`` of each folder a
rename changed), and OSErrors mapped to one-line errors (a full disk: exit 9)."""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import posixpath
import shutil
import stat
from pathlib import Path

from cachetool import bounds
from cachetool.bundle.manifest import FileEntry, Unit
from cachetool.bundle.paths import RESERVED_PREFIX, short_path
from cachetool.cache_root import CacheRoot
from cachetool.digests import sha256_stream
from cachetool.errors import (
    CachetoolError,
    InstallIOError,
    PathTooLongError,
    UnsafeDestinationError,
    UsageError,
    disk_full,
    user_path,
)
from cachetool.exit_codes import DISK_FULL_ERRNOS

STAGING_PREFIX = RESERVED_PREFIX + "-staging-"
# mkdtemp's random part, then the tree folder: staged files live at {root}/{STAGING_PREFIX}XXXXXXXX/tree/{path}
STAGED_PREFIX_LEN = len(STAGING_PREFIX) + 8 + len("/tree/")
CHUNK = 1 << 20
LOCK_POLL_SECONDS = 0.05  # how often a bounded wait for the root's lock tries it again
_RENAME_EXCHANGE = 2

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def open_dir_chain(root_fd: int, rel: str, create: bool, modes: dict[str, int]) -> int | None:
    """Open folder ``rel`` under ``root_fd`` one component at a time with O_NOFOLLOW; create missing ones.

    Returns an fd, or None if a component is missing and ``create`` is false.
    """
    fd = os.dup(root_fd)
    sofar = ""
    try:
        for part in rel.split("/") if rel else []:
            sofar = f"{sofar}/{part}" if sofar else part
            try:
                nfd = os.open(part, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    os.close(fd)
                    return None
                try:
                    os.mkdir(part, modes.get(sofar, 0o755), dir_fd=fd)
                    os.fsync(fd)  # the new folder's name is durable before anything is renamed into it
                except FileExistsError:
                    pass
                nfd = os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafeDestinationError(
                        f"{sofar!r} in the cache root is a symlink or not a folder; refusing to write through it",
                        path=sofar,
                    ) from None
                raise
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        try:
            os.close(fd)
        except OSError:
            pass
        raise


def hash_existing(dir_fd: int, rel: str) -> tuple[str, int, int] | None:
    """(digest, size, mode) of regular file ``rel`` under ``dir_fd`` (no symlinks), or None."""
    parent, name = posixpath.split(rel)
    pfd = open_dir_chain(dir_fd, parent, False, {}) if parent else os.dup(dir_fd)
    if pfd is None:
        return None
    try:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=pfd)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                return None
            digest, _n = sha256_stream(f)
            return digest, st.st_size, stat.S_IMODE(st.st_mode)
    except UnsafeDestinationError:
        return None
    finally:
        os.close(pfd)


def unit_matches(root_fd: int, unit: Unit, files: list[FileEntry]) -> bool:
    for f in files:
        got = hash_existing(root_fd, f.path)
        if got is None or got[0] != f.digest or got[1] != f.size:
            return False
    return True


def write_new(dir_fd: int, rel: str, data: bytes, mode: int) -> None:
    """Create file ``rel`` under ``dir_fd`` (``O_EXCL|O_NOFOLLOW``: never through a link, never over a file) with
    ``data`` and ``mode``."""
    fd = os.open(rel, NEW_FILE_FLAGS, 0o600, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


@functools.cache
def _libc(name: str, *argtypes):
    """The C library's function ``name`` (with errno), or None where the system lacks it."""
    import ctypes

    try:
        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = list(argtypes)
    fn.restype = ctypes.c_int
    return fn


def syncfs():
    """syncfs(2) of the C library (Linux), or None."""
    import ctypes

    return _libc("syncfs", ctypes.c_int)


def sync_tree(top: Path) -> None:
    """Make every file and folder under ``top`` durable before anything is renamed into place: one ``syncfs`` of
    its file system (Linux), else an ``fsync`` of each file and folder. Writing 100,000 files and then syncing
    once costs one flush; an ``fsync`` after each file would cost 100,000 journal commits."""
    fn = syncfs()
    if fn is not None:
        import ctypes

        fd = os.open(top, DIR_FLAGS)
        try:
            if fn(fd) == 0:
                return
            err = ctypes.get_errno()
        finally:
            os.close(fd)
        raise OSError(err, os.strerror(err), str(top))
    for dirpath, _dirnames, filenames in os.walk(top):
        for name in filenames:
            fsync_path(os.path.join(dirpath, name), os.O_RDONLY | os.O_NOFOLLOW)
        fsync_path(dirpath, DIR_FLAGS)


def fsync_path(path: str | Path, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def copy_file(src: Path, dest: Path, mode: int) -> None:
    """Copy a verified file (copy_file_range: in-kernel, a reflink where the filesystem can)."""
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        with open(src, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            done = 0
            try:
                while done < size:
                    n = os.copy_file_range(f.fileno(), fd, size - done)
                    if n == 0:
                        break
                    done += n
            except (AttributeError, OSError):
                done = 0
            if done != size:
                os.lseek(fd, 0, os.SEEK_SET)
                os.ftruncate(fd, 0)
                f.seek(0)
                while True:
                    chunk = f.read(CHUNK)
                    if not chunk:
                        break
                    os.write(fd, chunk)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def fs_error(exc: OSError, root: Path, doing: str) -> CachetoolError:
    """An OSError as one short line: a full disk and a name too long get their own classes (and exit codes)."""
    where = short_path(user_path(exc.filename)) if exc.filename else ""  # not the staging folder's name
    if exc.errno in DISK_FULL_ERRNOS:
        return disk_full(exc, doing, root, "nothing was installed: free space or use another cache root")
    if exc.errno == errno.ENAMETOOLONG:
        return PathTooLongError(f"{doing}: a path is too long for the file system of {root} ({where})")
    return InstallIOError(f"{doing}: {exc.strerror or exc}" + (f" ({where})" if where else ""))


def open_root(given: CacheRoot) -> tuple[Path, int, Path | None]:
    """Create the cache root if missing, resolve and open it. Returns (root, fd, topmost folder this call created,
    to remove again on failure, or None)."""
    created = None
    root = given.path
    try:
        if not root.exists():
            p = root
            while not p.exists():
                created = p
                p = p.parent
            root.mkdir(parents=True, exist_ok=True)
        root = given.resolved
        if not root.is_dir():
            raise UsageError(f"cache root {root} is not a folder")
        return root, os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)), created
    except OSError as exc:
        if created is not None:
            remove_empty_tree(created)
        if exc.errno in DISK_FULL_ERRNOS or exc.errno == errno.ENAMETOOLONG:
            raise fs_error(exc, root, "cannot use cache root") from None
        if exc.errno == errno.ENOTDIR:  # a file on the way to the root: the root cannot be a folder
            blocker = next((p for p in (root, *root.parents) if p.exists() and not p.is_dir()), None)
            raise UsageError(
                f"cache root {root} cannot be a folder: {blocker or 'a part of its path'} is a file"
            ) from None
        why = "a dangling symlink" if root.is_symlink() and not root.exists() else (exc.strerror or str(exc))
        raise InstallIOError(f"cannot use cache root {root}: {why}") from None


def remove_stale_staging(root: Path) -> None:
    # Called with the root lock held: any staging folder is left over from a killed install.
    for e in os.scandir(root):
        if e.name.startswith(STAGING_PREFIX) and e.is_dir(follow_symlinks=False):
            shutil.rmtree(e.path, ignore_errors=True)


def lock_root(root_fd: int, root: Path) -> None:
    """The exclusive lock on the cache root. Under an applied bound (``pull --timeout``, a stop signal:
    :mod:`cachetool.bounds`) the wait is polled, so that it ends with the bound; without one it blocks."""
    if not bounds.current():
        fcntl.flock(root_fd, fcntl.LOCK_EX)
        return
    while True:
        try:
            fcntl.flock(root_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            bounds.sleep(LOCK_POLL_SECONDS, f"the wait for the install lock on {root} (another install holds it)")


def remove_empty_tree(top: Path) -> None:
    """Remove ``top`` and folders under it if they hold no files (a root this call created)."""
    for dirpath, _dirnames, _filenames in os.walk(top, topdown=False):
        try:
            os.rmdir(dirpath)
        except OSError:
            pass


def renameat2():
    """renameat2(2) of the C library (Linux), or None."""
    import ctypes

    return _libc("renameat2", ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)


def exchange(src_fd: int, dst_fd: int, name: str) -> bool:
    """Swap ``name`` under ``src_fd`` with ``name`` under ``dst_fd`` in one step (``renameat2(RENAME_EXCHANGE)``);
    False where the kernel or the file system cannot."""
    import ctypes

    fn = renameat2()
    if fn is None:
        return False
    b = os.fsencode(name)
    if fn(src_fd, b, dst_fd, b, _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), name)
