"""Install a bundle into a cache root: verify, preflight, fetch + verify blobs, stage, rename into place.

The order is the safety contract (see :mod:`cachetool.source`):

1. read the manifest and the signature; verify the signature against the pinned keys (unless
   ``insecure_skip_verify``); parse and validate the manifest (schema, paths, modes, sizes, duplicates);
2. preflight: the bundle's fingerprint and compiler/env factors against this machine, naming what differs;
   nothing is downloaded and nothing is written before this passes;
3. take an exclusive ``fcntl.flock`` on the cache root folder itself (no lock file is left behind); remove
   stale staging folders of killed installs; plan: units already present with the same content are skipped,
   units whose files differ are replaced (``keep_changed``: refused as a miss), paths the root's file system
   cannot hold are refused;
4. fetch each needed blob into a staging folder ``{root}/.cachetool-staging-*`` (same filesystem), check its
   stored size and sha256, decompress it with output bounded by the declared size, check the content sha256,
   and write the files (``O_EXCL|O_NOFOLLOW``) with their modes;
5. commit: rename each install unit (a rank folder) into place with ``renameat`` relative to parent folders
   opened with ``O_NOFOLLOW`` (a symlink planted in the destination is refused, never followed); a unit being
   replaced is swapped in with ``renameat2(RENAME_EXCHANGE)``.

The code follows these phases: :func:`verified_manifest` (shared with :func:`verify_bundle`), :func:`_open_root`
and the lock, :func:`_plan`, :func:`_stage`, :func:`_commit`. A failure at any step removes the staging folder,
the source settles its downloads under the lock (:meth:`BundleSource.settle`), and a cache root this call
created is removed again if empty; a full disk is :class:`DiskFullError` (exit 9).
A kill -9 leaves at most a stale staging folder (never a partial unit); the next install removes it.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import functools
import hashlib
import logging
import os
import posixpath
import shutil
import stat
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable

from cachetool.errors import (BlobVerificationError, clip, CacheMissError, CachetoolError, ConflictError, DiskFullError,  # noqa: F401
                              InstallIOError, PathTooLongError, PreflightError, UnitChangedError, UnsafeDestinationError,
                              UsageError, VerificationError, WaitTimeoutError)
from cachetool.factors import compare_factors, short_repr
from cachetool.manifest import RESERVED_PREFIX, FileEntry, Manifest, Unit, manifest_digest, short_path
from cachetool.source import BundleSource
from cachetool.stores.base import BlobRef

log = logging.getLogger("cachetool.install")

STAGING_PREFIX = RESERVED_PREFIX + "-staging-"
_CHUNK = 1 << 20

INSECURE_WARNING = (
    "WARNING: --insecure-skip-verify: the bundle's signature is NOT checked. A compile cache is executable code; "
    "anyone who could write this bundle can run code on every server that loads it."
)



@dataclasses.dataclass
class InstallResult:
    manifest_digest: str
    cache_root: Path
    units_installed: list[str]
    units_present: list[str]
    files: int  # files written by this call
    bytes: int  # content bytes written by this call
    blobs_fetched: int
    key_id: str | None  # the trusted key that verified the signature; None with insecure_skip_verify
    verified: bool
    preflight: list[str]  # what preflight checked ("fingerprint", "compiler factors", ...)
    seconds: float = 0.0
    units_replaced: list[str] = dataclasses.field(default_factory=list)  # in units_installed: they had other files
    preflight_seconds: float = 0.0  # of ``seconds``: the preflight (fingerprint, factors, the server's key)

    @property
    def already_installed(self) -> bool:
        return not self.units_installed

    def to_dict(self) -> dict:
        return {"cache_root": str(self.cache_root), "manifest_digest": self.manifest_digest,
                "units_installed": self.units_installed, "units_present": self.units_present, "files": self.files,
                "bytes": self.bytes, "key_id": self.key_id, "verified": self.verified, "preflight": self.preflight,
                "already_installed": self.already_installed, "units_replaced": self.units_replaced,
                "seconds": self.seconds, "preflight_seconds": self.preflight_seconds}


# --------------------------------------------------------------------------------------------------------------
# preflight

def _factor_values(key_factors: dict | None, name: str) -> dict | None:
    if not isinstance(key_factors, dict):
        return None
    f = key_factors.get(name)
    if isinstance(f, dict) and isinstance(f.get("values"), dict):
        return f["values"]
    return None


def _factor_refusal(diffs: list, what: str, ours: str, suffix: str, also: int, of: str = "") -> PreflightError:
    """The one-line refusal naming the first of ``diffs`` (then up to ``also`` more field names)."""
    d = diffs[0]
    more = f" (also: {', '.join(x.name for x in diffs[1:1 + also])}{', ...' if len(diffs) > 1 + also else ''})" \
        if len(diffs) > 1 else ""
    return PreflightError(f"preflight: bundle cannot hit here: {what} {d.name!r}{of} differs: bundle "
                          f"{short_repr(d.a)}, {ours} {short_repr(d.b)}{more}{suffix}")


def check_expected_key(manifest: Manifest, expected: dict) -> str:
    """Compare the bundle's cache keys with ``expected`` (``CacheKey.to_json()`` of the config the server will
    run, from :func:`compiler.runner.compute_cache_key`). Returns the matching hash; raises
    :class:`PreflightError` naming the first factor and field that differ when no hash folder matches."""
    want = expected.get("hash")
    if any(k.hash == want for k in manifest.keys):
        return want
    with_factors = [k for k in manifest.keys if isinstance(k.factors, dict)]
    if not with_factors:
        raise PreflightError(f"preflight: bundle cannot hit here: it holds cache(s) "
                             f"{', '.join(k.hash for k in manifest.keys) or '(none)'}, this config needs {want}")
    k = with_factors[0]
    ours = expected.get("factors") or {}
    for name in ("config", "code", "env", "compiler"):  # the first factor present on both sides that differs
        if _factor_values(k.factors, name) is None or _factor_values(ours, name) is None:
            continue
        diffs = compare_factors(k.factors, ours, only=(name,))
        if diffs:
            raise _factor_refusal(diffs, f"{name} factor field", "this config", f" (cache {k.hash} vs {want})", 3)
    raise PreflightError(f"preflight: bundle cannot hit here: cache {k.hash} differs from this config's {want}")


def run_preflight(manifest: Manifest, *, device: str | None = None, expected_key=None) -> list[str]:
    """Raise :class:`PreflightError` naming the first difference; return the list of things checked.

    ``expected_key``: the cache key the server's model/config will use, as a dict (``CacheKey.to_json()``) or a
    :class:`compiler.key_prediction.ServerKeyPredictor` (predicted from the bundle's own factors, no trace);
    checked first (config and code factors can only be checked with it). Compiler factors are taken without
    importing torch where the bundle's evidence matches this machine (:func:`compiler.cache_key.cheap_compiler_factors`);
    only a difference is confirmed with the exact values, so a message names a real difference."""
    from cachetool import engines
    from cachetool.fingerprint import compare, local_fingerprint

    checked = []
    engine = engines.for_layout(manifest.layout)
    asks_engine = expected_key is not None and hasattr(expected_key, "expected_for")
    if expected_key is not None and not asks_engine:
        checked.append(f"cache key {check_expected_key(manifest, _expected(manifest, expected_key))}")
    bundle_fp = manifest.fingerprint or {}
    dev = device or bundle_fp.get("device") or "cpu"
    local_fp = local_fingerprint(device=dev)
    local_fp.update(engine.machine_facts(local_fp["device"]))
    diffs = compare(bundle_fp, local_fp)
    if diffs:
        field, b, l = diffs[0]
        more = f" (also: {', '.join(d[0] for d in diffs[1:])})" if len(diffs) > 1 else ""
        raise PreflightError(
            f"preflight: bundle cannot hit here: fingerprint {field!r} differs: bundle {short_repr(b)}, "
            f"this machine {short_repr(l)}{more}")
    checked.append("fingerprint")
    if asks_engine:  # the engine itself says which key folder the server will use (vLLM: its parser and config)
        h = expected_key.expected_for(manifest)
        cost = getattr(expected_key, "seconds", None)
        checked.append(f"cache key {h}" + (f" ({engine.name} asked: {cost:.1f} s)" if cost else ""))
    if engine.name != "native":
        return checked  # the native compiler's factors below do not describe another engine's caches

    with_factors = [k for k in manifest.keys if _factor_values(k.factors, "compiler") is not None
                    or _factor_values(k.factors, "env") is not None]
    if not with_factors:
        return checked
    # The device this machine really has (asked for cuda on a machine without a GPU: the cpu); a bundle's own
    # fingerprint may name any device string, and only a real one reaches torch.
    local_dev = dev if local_fp["device"] == "cuda" and dev.startswith("cuda") else local_fp["device"]
    try:
        from compiler import cache_key as ck  # lazy: cachetool works without compiler (e.g. Triton bundles)
    except ImportError as exc:
        log.warning("preflight: compiler.cache_key is not importable (%s); factors not checked", exc)
        return checked
    local_env = ck.local_env_factors()
    for k in with_factors:
        for name, local in (("compiler", _local_compiler_values(ck, local_dev, k.factors)), ("env", local_env)):
            values = _factor_values(k.factors, name)
            diff = compare_factors({name: {"values": values}}, {name: {"values": local}}, only=(name,)) \
                if values is not None else []
            if diff:
                raise _factor_refusal(diff, f"{name} factor", "this machine", "", 5, of=f" of cache {k.hash}")
    checked += ["compiler factors", "env factors"]
    return checked


def _expected(manifest: Manifest, expected_key) -> dict:
    """A predictor's key for this bundle (``{"hash", "factors"}``), or the dict given."""
    predict = getattr(expected_key, "predict", None)
    if predict is None:
        return expected_key
    from compiler.cache_key import CacheKey as CompilerKey
    from compiler.key_prediction import KeyMiss
    from compiler.models.llama_config import ModelSpecError

    candidates = [CompilerKey(k.hash, k.factors) for k in manifest.keys if isinstance(k.factors, dict)]
    if not candidates:
        raise PreflightError(f"preflight: bundle cannot hit here: it records no hash factors for "
                             f"{', '.join(k.hash for k in manifest.keys) or 'its caches'}")
    try:
        key = predict(candidates)
    except KeyMiss as miss:
        raise PreflightError(f"preflight: bundle cannot hit here: {miss.reason}") from None
    except ModelSpecError as exc:
        raise UsageError(str(exc)) from None
    except (RuntimeError, AssertionError) as exc:  # torch cannot describe the device
        raise _factors_unavailable(getattr(expected_key, "device", "?"), exc) from None
    return {"hash": key.hash, "factors": key.factors}


def _local_compiler_values(ck, device: str, factors: dict) -> dict:
    """This machine's compiler factor values for a bundle key: from the bundle's evidence when it matches (no
    torch import), else computed (and then also when the cheap values differ, to name a real difference)."""
    recorded = factors.get("compiler") if isinstance(factors, dict) else None
    cheap = ck.cheap_compiler_factors(device, recorded) if isinstance(recorded, dict) else None
    if cheap is not None and cheap == recorded.get("values"):
        return cheap
    try:
        return ck.local_compiler_factors(device)
    except (RuntimeError, AssertionError) as exc:  # torch cannot describe the device
        raise _factors_unavailable(device, exc) from None


def _lock_root(root_fd: int, root: Path, deadline: float | None) -> None:
    """The exclusive lock on the cache root; with a ``deadline``, polled so that the wait ends with it."""
    if deadline is None:
        fcntl.flock(root_fd, fcntl.LOCK_EX)
        return
    while True:
        try:
            fcntl.flock(root_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise WaitTimeoutError(f"timed out waiting for the install lock on {root} (another install holds it)") \
                    from None
            time.sleep(0.05)


def _factors_unavailable(device: str, exc: BaseException) -> PreflightError:
    first = clip((str(exc).splitlines() or [type(exc).__name__])[0], 160)
    return PreflightError(f"preflight: cannot compute this machine's compiler factors for {device!r}: {first}")


# --------------------------------------------------------------------------------------------------------------
# rank selection

def parse_ranks(spec: str | Iterable | None) -> set[str] | None:
    """``"0,1"`` (tensor-parallel ranks, any dp rank), ``"0_1"`` or ``"rank_0_1"``; None = all."""
    if spec is None:
        return None
    items = spec.split(",") if isinstance(spec, str) else [str(s) for s in spec]
    out = set()
    for it in items:
        it = it.strip()
        if not it:
            continue
        name = it[5:] if it.startswith("rank_") else it
        parts = name.split("_")
        if not all(p.isdigit() for p in parts) or len(parts) not in (1, 2):
            raise UsageError(f"bad rank {it!r}: use 0, 0_1 or rank_0_1")
        out.add(name)
    if not out:
        raise UsageError(f"--ranks {spec!r} names no rank: use 0, 0_1 or rank_0_1 (comma-separated)")
    return out


def _select_units(manifest: Manifest, ranks: set[str] | None) -> list[Unit]:
    if ranks is None:
        return list(manifest.units)
    chosen = []
    matched = set()
    for u in manifest.units:
        if u.rank is None:
            chosen.append(u)
            continue
        r, dp = u.rank[5:].split("_")
        for want in ranks:
            if want == r or want == f"{r}_{dp}":
                chosen.append(u)
                matched.add(want)
                break
    missing = ranks - matched
    if missing:
        raise UsageError(f"bundle has no rank {', '.join(sorted(missing))} (it has {', '.join(manifest.ranks) or 'none'})")
    return chosen


# --------------------------------------------------------------------------------------------------------------
# filesystem helpers (fd-relative, never following symlinks)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _open_dir_chain(root_fd: int, rel: str, create: bool, modes: dict[str, int]) -> int | None:
    """Open folder ``rel`` under ``root_fd`` one component at a time with O_NOFOLLOW; create missing ones.

    Returns an fd, or None if a component is missing and ``create`` is false.
    """
    fd = os.dup(root_fd)
    sofar = ""
    try:
        for part in rel.split("/") if rel else []:
            sofar = f"{sofar}/{part}" if sofar else part
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    os.close(fd)
                    return None
                try:
                    os.mkdir(part, modes.get(sofar, 0o755), dir_fd=fd)
                except FileExistsError:
                    pass
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafeDestinationError(
                        f"{sofar!r} in the cache root is a symlink or not a folder; refusing to write through it"
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


def _hash_existing(dir_fd: int, rel: str) -> tuple[str, int, int] | None:
    """(digest, size, mode) of regular file ``rel`` under ``dir_fd`` (no symlinks), or None."""
    parent, name = posixpath.split(rel)
    pfd = _open_dir_chain(dir_fd, parent, False, {}) if parent else os.dup(dir_fd)
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
            h = hashlib.sha256()
            while True:
                chunk = f.read(_CHUNK)
                if not chunk:
                    break
                h.update(chunk)
            return "sha256:" + h.hexdigest(), st.st_size, stat.S_IMODE(st.st_mode)
    except UnsafeDestinationError:
        return None
    finally:
        os.close(pfd)


def _unit_matches(root_fd: int, unit: Unit, files: list[FileEntry]) -> bool:
    for f in files:
        got = _hash_existing(root_fd, f.path)
        if got is None or got[0] != f.digest or got[1] != f.size:
            return False
    return True


# --------------------------------------------------------------------------------------------------------------
# blobs

def _check_stored(blob: BlobRef, zst: Path) -> None:
    import zstandard

    st = zst.stat()
    if st.st_size != blob.stored_size:
        raise BlobVerificationError(
            f"blob {blob.digest[:19]} is {st.st_size} bytes stored, manifest says {blob.stored_size} (truncated or size lie)")
    h = hashlib.sha256()
    with open(zst, "rb") as f:
        head = f.read(18)
        h.update(head)
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            h.update(chunk)
    if "sha256:" + h.hexdigest() != blob.stored_digest:
        raise BlobVerificationError(f"blob {blob.digest[:19]}: stored bytes do not match their digest (tampered)")
    try:
        params = zstandard.get_frame_parameters(head)
    except zstandard.ZstdError:
        raise BlobVerificationError(f"blob {blob.digest[:19]} is not a zstd frame") from None
    if params.content_size != zstandard.CONTENTSIZE_UNKNOWN and params.content_size != blob.size:
        raise BlobVerificationError(
            f"blob {blob.digest[:19]} declares {params.content_size} bytes in its zstd frame, manifest says {blob.size} "
            "(size lie)")


def expand_blob(blob: BlobRef, zst: Path, out) -> None:
    """Verify the stored bytes at ``zst`` and write the content to ``out`` (a binary file or None).

    Decompression never produces more than ``blob.size + 1`` bytes (bombs stop there); the content's sha256
    and size must match the manifest.
    """
    import zstandard

    _check_stored(blob, zst)
    dctx = zstandard.ZstdDecompressor(max_window_size=1 << 27)
    h = hashlib.sha256()
    n = 0
    with open(zst, "rb") as f:
        try:
            reader = dctx.stream_reader(f, read_across_frames=True)
            while True:
                chunk = reader.read(min(_CHUNK, blob.size - n + 1))
                if not chunk:
                    break
                n += len(chunk)
                if n > blob.size:
                    raise BlobVerificationError(
                        f"blob {blob.digest[:19]} decompresses beyond its declared {blob.size} bytes "
                        "(decompression bomb or size lie)")
                h.update(chunk)
                if out is not None:
                    out.write(chunk)
        except zstandard.ZstdError as exc:
            raise BlobVerificationError(f"blob {blob.digest[:19]} is corrupt zstd ({exc})") from None
    if n != blob.size:
        raise BlobVerificationError(f"blob {blob.digest[:19]} decompresses to {n} bytes, manifest says {blob.size}")
    if "sha256:" + h.hexdigest() != blob.digest:
        raise BlobVerificationError(f"blob {blob.digest[:19]}: content does not match its digest (tampered)")


def _verify_and_expand(blob: BlobRef, zst: Path, dest: Path, mode: int) -> None:
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    with os.fdopen(fd, "wb") as out:
        expand_blob(blob, zst, out)
        os.fchmod(out.fileno(), mode)


def verified_manifest(source: BundleSource, *, trust: Iterable | None = None, insecure_skip_verify: bool = False,
                      warn: Callable[[str], None] | None = None) -> tuple[bytes, Manifest, str | None]:
    """Phase 1 of verify and install: the manifest's bytes, checked against the signature and the pinned keys
    (unless ``insecure_skip_verify``, which warns), then parsed and validated. Returns (bytes, manifest, key id)."""
    mbytes = source.manifest_bytes()
    key_id = None
    if insecure_skip_verify:
        (warn or log.warning)(INSECURE_WARNING)
    else:
        from cachetool.signing import verify_envelope
        from cachetool.trust import load_trusted_keys

        key_id = verify_envelope(source.signature_bytes(), mbytes, load_trusted_keys(trust)).keyid
    return mbytes, Manifest.from_bytes(mbytes), key_id


def verify_bundle(source: BundleSource, *, trust: Iterable | None = None, insecure_skip_verify: bool = False,
                  warn: Callable[[str], None] | None = None) -> tuple[Manifest, str | None]:
    """Verify the signature (unless skipped) and every blob of ``source``, writing nothing but temp files.

    Returns (manifest, key id of the verifying key or None).
    """
    _, manifest, key_id = verified_manifest(source, trust=trust, insecure_skip_verify=insecure_skip_verify, warn=warn)
    with tempfile.TemporaryDirectory(prefix="cachetool-verify-") as tmp:
        for blob in manifest.blobs:
            zst = Path(tmp) / "blob.zst"
            source.fetch_blob(blob, zst)
            expand_blob(blob, zst, None)
            zst.unlink()
    return manifest, key_id


def _copy_file(src: Path, dest: Path, mode: int) -> None:
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
                    chunk = f.read(_CHUNK)
                    if not chunk:
                        break
                    os.write(fd, chunk)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------------------------
# install, in phases: verified manifest -> locked root -> plan -> stage -> commit

_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
# mkdtemp's random part, then the tree folder: staged files live at {root}/{STAGING_PREFIX}XXXXXXXX/tree/{path}
_STAGED_PREFIX_LEN = len(STAGING_PREFIX) + 8 + len("/tree/")
_RENAME_EXCHANGE = 2


@dataclasses.dataclass
class _Plan:
    units: list[Unit]  # to install: absent, or present with other files (then in ``replace``)
    replace: set[str]
    present: list[str]  # present with the bundle's files: skipped
    files: dict[str, list[FileEntry]]  # unit path -> the bundle's files in it


def _fs_error(exc: OSError, root: Path, doing: str) -> CachetoolError:
    """An OSError as one short line: a full disk and a name too long get their own classes (and exit codes)."""
    where = short_path(os.fsdecode(exc.filename)) if exc.filename else ""
    if exc.errno in _DISK_FULL:
        return DiskFullError(f"{doing}: the file system of {root} is full ({exc.strerror}); nothing was installed: "
                             "free space or use another cache root")
    if exc.errno == errno.ENAMETOOLONG:
        return PathTooLongError(f"{doing}: a path is too long for the file system of {root} ({where})")
    return InstallIOError(f"{doing}: {exc.strerror or exc}" + (f" ({where})" if where else ""))


def _open_root(root: Path) -> tuple[Path, int, Path | None]:
    """Create the cache root if missing, resolve and open it. Returns (root, fd, topmost folder this call created,
    to remove again on failure, or None)."""
    created = None
    try:
        if not root.exists():
            p = root
            while not p.exists():
                created = p
                p = p.parent
            root.mkdir(parents=True, exist_ok=True)
        root = root.resolve()
        if not root.is_dir():
            raise UsageError(f"cache root {root} is not a folder")
        return root, os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)), created
    except OSError as exc:
        if created is not None:
            _remove_empty_tree(created)
        if exc.errno in _DISK_FULL or exc.errno == errno.ENAMETOOLONG:
            raise _fs_error(exc, root, "cannot use cache root") from None
        if exc.errno == errno.ENOTDIR:  # a file on the way to the root: the root cannot be a folder
            blocker = next((p for p in (root, *root.parents) if p.exists() and not p.is_dir()), None)
            raise UsageError(f"cache root {root} cannot be a folder: {blocker or 'a part of its path'} is a file") \
                from None
        why = "a dangling symlink" if root.is_symlink() and not root.exists() else (exc.strerror or str(exc))
        raise InstallIOError(f"cannot use cache root {root}: {why}") from None


def _remove_stale_staging(root: Path) -> None:
    # Called with the root lock held: any staging folder is left over from a killed install.
    for e in os.scandir(root):
        if e.name.startswith(STAGING_PREFIX) and e.is_dir(follow_symlinks=False):
            shutil.rmtree(e.path, ignore_errors=True)


def _plan(manifest: Manifest, units: list[Unit], root_fd: int, root: Path, keep_changed: bool) -> _Plan:
    """Which units to install. A unit whose files all match is skipped (extra files a server added are fine); one
    whose files differ is replaced (``keep_changed``: refused with :class:`UnitChangedError`)."""
    files: dict[str, list[FileEntry]] = {u.path: [] for u in units}
    for f in manifest.files:
        u = manifest.unit_of(f.path)
        if u is not None and u.path in files:
            files[u.path].append(f)
    plan = _Plan([], set(), [], files)
    for u in units:
        ufd = _open_dir_chain(root_fd, u.path, False, {})
        if ufd is None:
            plan.units.append(u)
            continue
        os.close(ufd)
        if _unit_matches(root_fd, u, files[u.path]):
            plan.present.append(u.path)
        elif keep_changed:
            raise UnitChangedError(f"{u.path} in {root} has files that differ from the bundle; kept as it is "
                                   "(--keep-changed): nothing installed")
        else:
            plan.units.append(u)
            plan.replace.add(u.path)
    _check_lengths(plan, manifest, root, root_fd)
    return plan


def _check_lengths(plan: _Plan, manifest: Manifest, root: Path, root_fd: int) -> None:
    """Refuse, before anything is fetched, a path the cache root's file system cannot hold (one name over its
    NAME_MAX, or the staged path over its PATH_MAX)."""
    try:
        name_max, path_max = os.fpathconf(root_fd, "PC_NAME_MAX"), os.fpathconf(root_fd, "PC_PATH_MAX")
    except (OSError, ValueError):
        name_max, path_max = 255, 4096
    base = len(os.fsencode(str(root))) + 1 + _STAGED_PREFIX_LEN
    for u in plan.units:
        for rel in [u.path, *(f.path for f in plan.files[u.path])]:
            b = rel.encode("utf-8")
            longest = max(len(part) for part in b.split(b"/"))
            if longest > name_max:
                raise PathTooLongError(f"manifest path {short_path(rel)} has a name of {longest} bytes; the file "
                                       f"system of {root} allows {name_max}")
            if base + len(b) >= path_max:
                raise PathTooLongError(f"manifest path {short_path(rel)} is too long to install under {root} "
                                       f"({base + len(b)} bytes staged; the file system allows {path_max - 1})")


def _all(ex: ThreadPoolExecutor, fn: Callable, items: Iterable) -> list:
    """``fn`` over ``items`` in ``ex``; on the first failure the tasks not yet started are cancelled (a missing
    blob must not be followed by downloads of all the others)."""
    futures = [ex.submit(fn, x) for x in items]
    try:
        return [f.result() for f in futures]
    except BaseException:
        for f in futures:
            f.cancel()
        raise


def _stage(source: BundleSource, manifest: Manifest, plan: _Plan, staging: Path,
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
        _verify_and_expand(blob, zst, tree / group[0].path, group[0].mode)
        zst.unlink()
        return blob.size

    def copy(pair: tuple[FileEntry, FileEntry]) -> int:
        first, other = pair
        _copy_file(tree / first.path, tree / other.path, other.mode)
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


@functools.lru_cache(maxsize=1)
def _renameat2():
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def _exchange(src_fd: int, dst_fd: int, name: str) -> bool:
    """Swap ``name`` under ``src_fd`` with ``name`` under ``dst_fd`` in one step (``renameat2(RENAME_EXCHANGE)``);
    False where the kernel or the file system cannot."""
    import ctypes

    fn = _renameat2()
    if fn is None:
        return False
    b = os.fsencode(name)
    if fn(src_fd, b, dst_fd, b, _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), name)


def _commit(plan: _Plan, manifest: Manifest, staging: Path, root_fd: int, root: Path) -> None:
    """Rename each staged unit into place, relative to parent folders opened with O_NOFOLLOW. A unit being replaced
    is swapped with the staged one atomically (readers see the old files or the new, never a mix) and the old one
    is deleted with the staging folder; where the swap is not available it is moved aside first."""
    dir_modes = {d.path: d.mode for d in manifest.dirs}
    tree_fd = os.open(staging / "tree", _DIR_FLAGS)
    aside = staging / "replaced"
    aside.mkdir()
    aside_fd = os.open(aside, _DIR_FLAGS)
    try:
        for i, u in enumerate(sorted(plan.units, key=lambda u: u.path)):
            parent, name = posixpath.split(u.path)
            src_fd = _open_dir_chain(tree_fd, parent, False, {})
            dst_fd = _open_dir_chain(root_fd, parent, True, dir_modes)
            try:
                try:
                    st = os.lstat(name, dir_fd=dst_fd)
                except FileNotFoundError:
                    st = None
                if st is not None and (stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode)):
                    raise UnsafeDestinationError(f"{u.path!r} in the cache root is a symlink or file")
                if st is not None and u.path not in plan.replace:
                    raise ConflictError(f"{u.path} appeared in {root} during the install; rerun")
                if st is not None and _exchange(src_fd, dst_fd, name):
                    continue
                if st is not None:
                    os.rename(name, f"old-{i}", src_dir_fd=dst_fd, dst_dir_fd=aside_fd)
                os.rename(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
            finally:
                os.close(src_fd)
                os.close(dst_fd)
    finally:
        os.close(tree_fd)
        os.close(aside_fd)


def install_bundle(
    source: BundleSource,
    cache_root: str | os.PathLike,
    *,
    trust: Iterable | None = None,
    insecure_skip_verify: bool = False,
    ranks: str | Iterable | None = None,
    preflight: bool = True,
    device: str | None = None,
    expected_key: dict | None = None,
    force: bool = False,
    keep_changed: bool = False,
    warn: Callable[[str], None] | None = None,
    workers: int | None = None,
    deadline: float | None = None,
) -> InstallResult:
    """Install ``source`` into ``cache_root``; see the module docstring. Returns an :class:`InstallResult`.

    ``trust``: public key paths / :class:`cachetool.signing.PublicKey` objects; None = the pinned keys
    (:func:`cachetool.trust.load_trusted_keys`). ``ranks``: ``"0,1"`` etc. (None = all). ``device``: the device
    preflight compares against (default: the bundle's). ``expected_key``: the key the server's config needs
    (see :func:`check_expected_key`). A unit present with files that differ from the bundle is replaced (one
    ``warn`` line each); ``keep_changed``: refuse instead (:class:`UnitChangedError`, a miss). ``force``: replace
    even with ``keep_changed`` (replacing is the default; the flag stays for old callers). ``deadline``
    (``time.monotonic()``): waiting for the root's lock past it raises :class:`WaitTimeoutError` (exit 7).
    """
    from cachetool.fingerprint import check_device

    t0 = time.monotonic()
    device = check_device(device)
    mbytes, manifest, key_id = verified_manifest(source, trust=trust, insecure_skip_verify=insecure_skip_verify,
                                                 warn=warn)
    units = _select_units(manifest, parse_ranks(ranks))
    t_pre = time.monotonic()
    checked = run_preflight(manifest, device=device, expected_key=expected_key) if preflight else []
    preflight_seconds = time.monotonic() - t_pre

    root, root_fd, created_root = _open_root(Path(cache_root).expanduser())
    try:
        _lock_root(root_fd, root, deadline)
        plan, nbytes, nfiles, fetched = _install_locked(source, manifest, units, root, root_fd,
                                                        keep_changed and not force, workers)
        for path in sorted(plan.replace):
            (warn or log.warning)(f"replaced {path} in {root}: its files differed from the bundle")
        return InstallResult(
            manifest_digest=manifest_digest(mbytes), cache_root=root, units_installed=[u.path for u in plan.units],
            units_present=plan.present, files=nfiles, bytes=nbytes, blobs_fetched=fetched, key_id=key_id,
            verified=not insecure_skip_verify, preflight=checked, seconds=time.monotonic() - t0,
            units_replaced=sorted(plan.replace), preflight_seconds=preflight_seconds)
    except BaseException as exc:
        if created_root is not None:
            _remove_empty_tree(created_root)
        if isinstance(exc, OSError):
            raise _fs_error(exc, root, f"install into {root} failed") from exc
        raise
    finally:
        os.close(root_fd)  # releases the lock


def _install_locked(source: BundleSource, manifest: Manifest, units: list[Unit], root: Path, root_fd: int,
                    keep_changed: bool, workers: int | None) -> tuple[_Plan, int, int, int]:
    """Plan, stage and commit with the root lock held; the staging folder is always removed, and the source
    settles (its partial downloads) still under the lock, told how the install ended."""
    staging: Path | None = None
    error: BaseException | None = None
    try:
        _remove_stale_staging(root)
        plan = _plan(manifest, units, root_fd, root, keep_changed)
        nbytes = nfiles = fetched = 0
        if plan.units:
            staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=root))
            nbytes, nfiles, fetched = _stage(source, manifest, plan, staging, workers)
            _commit(plan, manifest, staging, root_fd, root)
        return plan, nbytes, nfiles, fetched
    except OSError as exc:
        error = _fs_error(exc, root, f"install into {root} failed")
        raise error from exc
    except BaseException as exc:
        error = exc
        raise
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        try:
            source.settle(error)
        except OSError as exc:  # cleaning up must not hide what happened
            log.warning("could not clean up after the install: %s", exc)


def _remove_empty_tree(top: Path) -> None:
    """Remove ``top`` and folders under it if they hold no files (a root this call created)."""
    for dirpath, dirnames, filenames in os.walk(top, topdown=False):
        try:
            os.rmdir(dirpath)
        except OSError:
            pass
