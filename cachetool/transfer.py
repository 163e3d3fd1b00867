"""Push and pull: moving bundles between this machine and a store.

``push`` writes blobs (skipping those the store has: a re-push of unchanged content uploads nothing), then the
manifest, then the signature, then the ref last, merging this bundle's platform into the tag's index (one tag
holds bundles for several platforms; an entry of the same platform is replaced).

``pull`` reads the ref, picks the entry whose platform is this machine's (or raises :class:`CacheMissError`
naming what differs for each entry), and hands a :class:`StoreSource` to :func:`cachetool.install.install_bundle`,
which verifies the signature and runs preflight before it asks for any blob. The source fetches nothing ahead.

Resuming: blobs are downloaded into ``{cache_root}/.cachetool-partial/`` (same filesystem as the install staging,
so a blob is hard-linked, not copied). An interrupted pull leaves the finished and the partial blobs there; the
rerun keeps finished ones and resumes partial ones with a ``Range`` request. Partial files are kept only where a
rerun can use them: after the store failed (exit 6) or ``--timeout`` ran out (exit 7). After a success, and after a
failure no rerun can mend (a blob missing from the store, bytes that fail a check, a full disk), this pull's files
are deleted (only those: other pulls into the same root keep theirs). Either way the folder is then cut to
``CACHETOOL_PARTIAL_MAX_BYTES`` (default 4 GiB), oldest files first. All of this happens under the cache root's
lock (:meth:`StoreSource.settle`), so no other pull is writing there.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable

from cachetool.digests import hexof, sha256_bytes, sha256_file
from cachetool.manifest import Manifest
from cachetool.errors import (CacheMissError, CachetoolError, NotFoundError, StoreError, UnsafeDestinationError, UsageError,
                              VerificationError, WaitTimeoutError)
from cachetool.refs import Ref, parse_ref
from cachetool.source import BundleSource
from cachetool.stores import open_store
from cachetool.stores.base import GC_MIN_AGE_S, BlobRef, RefEntry, RefIndex, Store
from cachetool.stores.gc import GcReport
from cachetool.stores.common import now_iso
from compiler import envs

PARTIAL_DIR = ".cachetool-partial"
PARTIAL_MAX_BYTES = 4 << 30  # default bound of a cache root's partial folder (CACHETOOL_PARTIAL_MAX_BYTES)
RETRYABLE = (StoreError, WaitTimeoutError, KeyboardInterrupt)  # failures after which a rerun uses the partial files


def partial_cap() -> int:
    text = envs.get("CACHETOOL_PARTIAL_MAX_BYTES")
    try:
        return max(0, int(text)) if text.strip() else PARTIAL_MAX_BYTES
    except ValueError:
        raise UsageError(f"CACHETOOL_PARTIAL_MAX_BYTES={text[:40]!r} is not a number of bytes") from None


def trim_partials(folder: Path, cap: int) -> None:
    """Delete the oldest files of the partial folder until it holds at most ``cap`` bytes. Callers hold the cache
    root's lock, so no pull is writing there."""
    try:
        entries = [(e.stat(follow_symlinks=False), e) for e in os.scandir(folder) if not e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return
    total = sum(st.st_size for st, _ in entries)
    for st, e in sorted(entries, key=lambda x: x[0].st_mtime):
        if total <= cap:
            break
        try:
            os.unlink(e.path)
        except FileNotFoundError:
            pass
        total -= st.st_size


# ------------------------------------------------------------------------------------------------ results
@dataclasses.dataclass
class PushResult:
    ref: str
    manifest_digest: str
    platform: str
    signed: bool
    blobs_total: int
    blobs_uploaded: int
    blobs_skipped: int  # already in the store
    bytes_uploaded: int  # stored (zstd) bytes of uploaded blobs + manifest + signature + ref
    bytes_skipped: int  # stored bytes of skipped blobs
    platforms: list[str]  # every platform under the tag after this push
    seconds: float
    pinned: str = ""  # the ref pinned to this bundle's digest (ref@sha256:...)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class PullResult:
    ref: str
    manifest_digest: str
    platform: str
    blobs_downloaded: int
    blobs_resumed: int  # partial blobs completed with a Range request
    blobs_reused: int  # finished blobs kept from an interrupted earlier pull
    bytes_downloaded: int  # bytes received from the store (blobs, manifest, signature, ref)
    install: object  # cachetool.install.InstallResult
    seconds: float

    def to_dict(self) -> dict:
        d = {k: v for k, v in dataclasses.asdict(self).items() if k != "install"}
        d["install"] = {k: v for k, v in self.install.to_dict().items() if k != "manifest_digest"}
        return d


# ------------------------------------------------------------------------------------------------ progress
class _Progress:
    """rich progress bars on stderr; a no-op when disabled (``--json``, not a terminal, library use)."""

    def __init__(self, enabled: bool):
        self._p = None
        if enabled:
            from rich.console import Console
            from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                       TransferSpeedColumn)

            self._p = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                               TimeRemainingColumn(), console=Console(stderr=True), transient=False)

    @property
    def enabled(self) -> bool:
        return self._p is not None

    def __enter__(self):
        if self._p:
            self._p.start()
        return self

    def __exit__(self, *exc):
        if self._p:
            self._p.stop()

    def task(self, description: str, total: int):
        return self._p.add_task(description, total=total) if self._p else None

    def advance(self, task, n: int) -> None:
        if self._p and task is not None:
            self._p.advance(task, n)

    def finish(self, task) -> None:
        """End the bar at 100 % of what was transferred (blobs of units already installed, or of ranks not asked
        for, were never fetched: the bar does not wait for them)."""
        if self._p and task is not None:
            done = self._p.tasks[[t.id for t in self._p.tasks].index(task)].completed
            self._p.update(task, total=done, completed=done)


def _progress_default(progress: bool | None) -> bool:
    if progress is not None:
        return progress
    import sys

    return sys.stderr.isatty()


# ------------------------------------------------------------------------------------------------ helpers
def _ref_and_store(ref: str | Ref, store: Store | None, store_options: dict | None) -> tuple[Ref, Store, bool]:
    r = ref if isinstance(ref, Ref) else parse_ref(ref)
    if store is not None:
        return r, store, False
    return r, open_store(r.store, **(store_options or {})), True


def _load_bundle(source, sign_key, layout: str):
    """A PackedBundle from a PackedBundle, a ``.ctb`` path or a cache folder; signed with ``sign_key`` if given."""
    from cachetool.bundle import PackedBundle, open_ctb, pack

    owned = False
    if isinstance(source, PackedBundle):
        bundle = source
    else:
        p = Path(source)
        if p.is_file():
            bundle, owned = open_ctb(p), True
        elif p.is_dir():
            return pack(p, layout=layout, sign_key=sign_key), True
        else:
            raise UsageError(f"{p} is neither a bundle file nor a cache folder")
    if sign_key is not None:
        from cachetool.signing import load_private_key, sign_manifest

        key = load_private_key(sign_key) if isinstance(sign_key, (str, os.PathLike)) else sign_key
        bundle = bundle.with_signature(sign_manifest(bundle.manifest_bytes(), key, bundle.signature_bytes()))
    return bundle, owned


def _check_stored_bytes(bundle, blob: BlobRef) -> None:
    digest, n = sha256_file(bundle.blob_path(blob))
    if n != blob.stored_size or digest != blob.stored_digest:
        raise VerificationError(f"{bundle.description}: blob {blob.digest[:19]} does not match the manifest "
                                "(tampered or truncated); nothing pushed")


def _check_envelope(bundle) -> None:
    import base64

    from cachetool.signing import parse_envelope

    sig = bundle.signature_bytes()
    if sig is None:
        return
    env = parse_envelope(sig)
    try:
        payload = base64.b64decode(env["payload"], validate=True)
    except ValueError:
        payload = None
    if payload != bundle.manifest_bytes():
        raise VerificationError(f"{bundle.description}: the signature is for a different manifest; nothing pushed")


def merge_index(old: RefIndex | None, name: str, tag: str, entry: RefEntry) -> RefIndex:
    """The tag's index with ``entry`` added, replacing an entry of the same platform."""
    kept = [e for e in (old.entries if old else ()) if e.platform != entry.platform]
    return RefIndex(name, tag, tuple(sorted([*kept, entry], key=lambda e: e.platform)))


# ------------------------------------------------------------------------------------------------ push
def push(source, ref: str | Ref, *, sign_key=None, layout: str = "auto", store: Store | None = None,
         store_options: dict | None = None, workers: int = 8, progress: bool | None = None) -> PushResult:
    """Push ``source`` (a PackedBundle, a ``.ctb`` path or a cache folder, packed on the way) to ``ref``.

    ``sign_key``: a private key (path or object) to sign with (a cache folder is signed while packing; a bundle
    gets the signature added). ``store_options``: ``endpoint_url``, ``profile``, ``region``, ``insecure``.
    """
    t0 = time.monotonic()
    if (ref.digest if isinstance(ref, Ref) else parse_ref(ref).digest):
        raise UsageError(f"{ref}: push writes a tag; a digest pin (@sha256:...) can only be pulled")
    r, st, own_store = _ref_and_store(ref, store, store_options)
    bundle, own_bundle = _load_bundle(source, sign_key, layout)
    try:
        blobs = list({b.stored_digest: b for b in bundle.blobs}.values())
        st.prepare_push(blobs, bundle.blob_path)
        with ThreadPoolExecutor(max(1, workers)) as ex:
            present = list(ex.map(st.has_blob, blobs))
        missing = [b for b, p in zip(blobs, present) if not p]
        skipped = [b for b, p in zip(blobs, present) if p]
        # A store is content-addressed and skips what it has: bytes written under a digest they don't match would
        # poison it for every later push and pull. Check everything before the first write.
        with ThreadPoolExecutor(max(1, workers)) as ex:
            list(ex.map(lambda b: _check_stored_bytes(bundle, b), missing))
        _check_envelope(bundle)
        up0 = st.counters.bytes_up
        with _Progress(_progress_default(progress)) as prog:
            task = prog.task(f"push {r.name}:{r.tag} ({len(missing)} of {len(blobs)} blobs)",
                             sum(b.stored_size for b in missing))

            def up(b: BlobRef) -> None:
                st.put_blob(b, bundle.blob_path(b))
                prog.advance(task, b.stored_size)

            with ThreadPoolExecutor(max(1, workers)) as ex:
                for _ in ex.map(up, sorted(missing, key=lambda b: -b.stored_size)):
                    pass
        digest = st.put_manifest(bundle.manifest_bytes(), blobs)
        if digest != bundle.manifest_digest:
            raise StoreError(f"{st.url} stored the manifest as {digest}, expected {bundle.manifest_digest}")
        sig = bundle.signature_bytes()
        if sig is not None:
            st.put_signature(digest, sig)
        entry = RefEntry(manifest_digest=digest, platform=bundle.platform, fingerprint=dict(bundle.manifest.fingerprint or {}),
                         size=bundle.stored_size, created=now_iso())
        index = st.update_ref(r.name, r.tag, lambda old: merge_index(old, r.name, r.tag, entry))
        up1 = st.counters.bytes_up
        return PushResult(ref=r.url, manifest_digest=digest, platform=entry.platform, signed=sig is not None,
                          blobs_total=len(blobs), blobs_uploaded=len(missing), blobs_skipped=len(skipped),
                          bytes_uploaded=up1 - up0, bytes_skipped=sum(b.stored_size for b in skipped),
                          platforms=[e.platform for e in index.entries], seconds=time.monotonic() - t0,
                          pinned=r.pinned(st.pinned_digest(digest)).url)
    finally:
        if own_bundle:
            bundle.close()
        if own_store:
            st.close()


# ------------------------------------------------------------------------------------------------ pull
def local_platform(entries: Iterable[RefEntry], device: str | None = None,
                   engine: str | None = None) -> tuple[list[str], dict]:
    """This machine's platform keys (one per engine whose bundles the tag holds, or the ``engine`` asked for)
    and fingerprint (with those engines' facts); probes the GPU only when some entry is a CUDA bundle."""
    from cachetool import engines
    from cachetool.fingerprint import local_fingerprint
    from cachetool.manifest import platform_key

    entries = list(entries)
    if device is None:
        device = None if any(e.platform.startswith("cuda") for e in entries) else "cpu"
    fp = local_fingerprint(device=device)
    wanted = [engine] if engine else ["native"] + (["vllm"] if any((e.fingerprint or {}).get("vllm")
                                                                   for e in entries) else [])
    keys, full = [], dict(fp)
    for name in wanted:
        facts = {k: v for k, v in engines.get(name).machine_facts(fp["device"]).items() if k != "engine"}
        keys.append(platform_key({**fp, **facts}))
        full.update({k: v for k, v in facts.items() if v is not None})
    return keys, full


def select_entry(index: RefIndex, ref_text: str, device: str | None = None, engine: str | None = None) -> RefEntry:
    """The entry for this machine, or a one-line CacheMissError saying why each entry does not fit."""
    from cachetool.fingerprint import compare

    if not index.entries:
        raise CacheMissError(f"{ref_text} holds no bundles")
    keys, fp = local_platform(index.entries, device, engine)
    for key in keys:
        for e in index.entries:
            if e.platform == key:
                return e
    key = " or ".join(keys)
    reasons = []
    for e in index.entries:
        diffs = compare(e.fingerprint or {}, fp)
        why = ", ".join(f"{f} {b!r} here {l!r}" for f, b, l in diffs[:3]) or "platform key differs"
        reasons.append(f"{e.platform} ({why})")
    raise CacheMissError(f"no bundle under {ref_text} fits this machine ({key}): " + "; ".join(reasons))


class StoreSource(BundleSource):
    """A bundle in a store, read lazily: manifest and signature first, each blob only when the installer asks."""

    def __init__(self, store: Store, ref: Ref, entry: RefEntry, partial_dir: Path, *,
                 deadline: float | None = None, on_blob: Callable[[BlobRef], None] | None = None):
        self.store = store
        self.entry = entry
        self.description = f"{ref.url} [{entry.platform}]"
        self.partial_dir = Path(partial_dir)
        self.deadline = deadline
        self.on_blob = on_blob
        self._manifest: bytes | None = None
        self._signature: bytes | None = None
        self._sig_read = False
        self._lock = threading.Lock()
        self._failed: StoreError | None = None
        self.used: set[Path] = set()  # partial files this pull wrote or read
        self.downloaded = 0
        self.resumed = 0
        self.reused = 0

    def _check_deadline(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise WaitTimeoutError(f"pull of {self.description} ran past --timeout")

    def manifest_bytes(self) -> bytes:
        if self._manifest is None:
            self._check_deadline()
            data = self.store.get_manifest(self.entry.manifest_digest)
            if sha256_bytes(data) != self.entry.manifest_digest:
                raise VerificationError(f"{self.description}: the manifest in the store does not match its digest")
            self._manifest = data
        return self._manifest

    def signature_bytes(self) -> bytes | None:
        if not self._sig_read:
            self._check_deadline()
            self._signature = self.store.get_signature(self.entry.manifest_digest)
            self._sig_read = True
        return self._signature

    @staticmethod
    def _stored_ok(path: Path, blob: BlobRef) -> bool:
        return sha256_file(path)[0] == blob.stored_digest

    def fetch_blob(self, blob: BlobRef, dest: Path) -> None:
        if self._failed is not None:
            # The store already failed this pull (server down, credentials): don't hammer it blob by blob.
            raise self._failed
        self._check_deadline()
        try:
            self._fetch(blob, dest)
        except StoreError as exc:
            self._failed = exc
            raise

    def discard_partials(self) -> None:
        """Delete the partial files this pull used (only those: another pull may share the folder)."""
        for p in self.used:
            p.unlink(missing_ok=True)
        _remove_if_empty(self.partial_dir)

    def settle(self, error: BaseException | None) -> None:
        """Under the cache root's lock, as the install ends: keep this pull's partial files only when a rerun can
        use them (the store failed or the time ran out), else delete them (installed; a blob missing from the
        store or failing its check; a full disk). Then bound the whole folder (:func:`trim_partials`)."""
        if not isinstance(error, RETRYABLE):
            self.discard_partials()
        trim_partials(self.partial_dir, partial_cap())
        _remove_if_empty(self.partial_dir)

    def _partial(self, blob: BlobRef) -> Path:
        """The partial file of ``blob``, never through a link: the folder must be a real folder, and a partial that
        is a symlink, a hard link or not a regular file is removed (a download appends to it)."""
        try:
            self.partial_dir.mkdir(mode=0o700)
        except FileExistsError:
            pass
        if not stat.S_ISDIR(os.lstat(self.partial_dir).st_mode):
            raise UnsafeDestinationError(
                f"{self.partial_dir} is a symlink or not a folder; refusing to download through it")
        part = self.partial_dir / hexof(blob.stored_digest)
        try:
            st = os.lstat(part)
        except FileNotFoundError:
            return part
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            part.unlink()
        return part

    def _fetch(self, blob: BlobRef, dest: Path) -> None:
        part = self._partial(blob)
        with self._lock:
            self.used.add(part)
        try:
            had = part.stat().st_size
        except FileNotFoundError:
            had = 0
        if 0 < had <= blob.stored_size:
            # Left by an interrupted pull: finish it (Range request) and check the whole; a bad one starts over.
            if had < blob.stored_size:
                self.store.get_blob(blob, part)
            if part.stat().st_size == blob.stored_size and self._stored_ok(part, blob):
                with self._lock:
                    if had == blob.stored_size:
                        self.reused += 1
                    else:
                        self.resumed += 1
                        self.downloaded += 1
            else:
                part.unlink(missing_ok=True)
                self.store.get_blob(blob, part)
                with self._lock:
                    self.downloaded += 1
        else:
            part.unlink(missing_ok=True)
            self.store.get_blob(blob, part)
            with self._lock:
                self.downloaded += 1
        try:
            os.link(part, dest)  # the partial stays until the install succeeds (a rerun reuses it)
        except OSError:
            shutil.copyfile(part, dest)
        if self.on_blob:
            self.on_blob(blob)


def pull(ref: str | Ref, cache_root: str | os.PathLike, *, trust=None, insecure_skip_verify: bool = False,
         ranks=None, device: str | None = None, expected_key: dict | None = None, force: bool = False,
         keep_changed: bool = False,
         preflight: bool = True,
         store: Store | None = None, store_options: dict | None = None, timeout: float | None = None,
         progress: bool | None = None, workers: int | None = None, warn: Callable[[str], None] | None = None,
         engine: str | None = None) -> PullResult:
    """Resolve ``ref``, pick this machine's bundle, and install it into ``cache_root`` (see the module docstring).

    ``timeout``: seconds for the whole pull (:class:`WaitTimeoutError` past it). ``engine``: the server's engine
    (``native``, ``vllm``), whose bundles the platform choice takes; None: any whose platform fits. Other
    arguments as for :func:`cachetool.install.install_bundle`.
    """
    from cachetool.install import install_bundle

    from cachetool.fingerprint import require_device

    t0 = time.monotonic()
    deadline = t0 + timeout if timeout else None
    device = require_device(device)
    if not insecure_skip_verify:  # the pinned keys first: a missing key file is a usage error, before any request
        from cachetool.trust import load_trusted_keys

        trust = load_trusted_keys(trust)
    r, st, own_store = _ref_and_store(ref, store, store_options)
    root = Path(cache_root).expanduser()
    partial = root / PARTIAL_DIR
    try:
        down0 = st.counters.bytes_down
        index = st.get_ref(r.name, r.tag) if r.digest is None else st.get_pinned(r.name, r.digest)
        entry = select_entry(index, r.url, device, engine)
        with _Progress(_progress_default(progress)) as prog:
            if prog.enabled:
                # Sizes are known once the manifest is read; the bar is made on the first blob.
                holder: dict = {}
                lock = threading.Lock()

                def on_blob(b: BlobRef) -> None:
                    with lock:
                        if "task" not in holder:
                            blobs = Manifest.from_bytes(src.manifest_bytes()).blobs
                            holder["task"] = prog.task(f"pull {r.name}:{r.tag} [{entry.platform}]",
                                                       sum(x.stored_size for x in blobs))
                    prog.advance(holder["task"], b.stored_size)
            else:
                on_blob = None
            src = StoreSource(st, r, entry, partial, deadline=deadline, on_blob=on_blob)
            try:
                result = install_bundle(src, root, trust=trust, insecure_skip_verify=insecure_skip_verify, ranks=ranks,
                                        preflight=preflight, device=device, expected_key=expected_key, force=force,
                                        keep_changed=keep_changed,
                                        warn=warn, workers=workers, deadline=deadline)
            except CachetoolError:  # the partial files were settled under the root lock (StoreSource.settle)
                _remove_if_empty(partial)
                _remove_if_empty(root)
                raise
            if prog.enabled and "task" in holder:
                prog.finish(holder["task"])
        down1 = st.counters.bytes_down
        return PullResult(ref=r.url, manifest_digest=entry.manifest_digest, platform=entry.platform,
                          blobs_downloaded=src.downloaded, blobs_resumed=src.resumed, blobs_reused=src.reused,
                          bytes_downloaded=down1 - down0, install=result, seconds=time.monotonic() - t0)
    finally:
        if own_store:
            st.close()


def _remove_if_empty(p: Path) -> None:
    try:
        p.rmdir()
    except OSError:
        pass


# ------------------------------------------------------------------------------------------------ ls / rm / gc
def list_refs(store_url: str, *, store_options: dict | None = None) -> list[RefIndex]:
    with open_store(store_url, **(store_options or {})) as st:
        return list(st.list_refs())


def remove(ref: str | Ref, *, store_options: dict | None = None, platform: str | None = None) -> RefIndex | None:
    """Delete the tag (or only one platform's entry of it); return the remaining index, or None if deleted.

    Both are a read-modify-write of the tag through ``Store.update_ref`` (locked, conditional or converging): a
    platform pushed to the same tag at the same moment is kept by ``--platform``, and no lock file stays behind."""
    r, st, _ = _ref_and_store(ref, None, store_options)
    if r.digest:
        st.close()
        raise UsageError(f"{r.url}: rm removes a tag; a digest pin names no tag")
    with st:
        index = st.get_ref(r.name, r.tag)  # NotFoundError names what is missing: the tag, the store, the bucket
        if platform is None:
            return st.update_ref(r.name, r.tag, lambda old: None)
        if not any(e.platform == platform for e in index.entries):
            raise NotFoundError(f"{r.url} has no {platform} entry (has {', '.join(e.platform for e in index.entries)})")
        return st.update_ref(r.name, r.tag, lambda old: without_platform(old, r, platform))


def without_platform(index: RefIndex | None, r: Ref, platform: str) -> RefIndex | None:
    """``index`` less ``platform``'s entry; None when nothing is left (the tag is then removed). Idempotent, as
    a store that re-reads and merges again (OCI) needs."""
    kept = tuple(e for e in (index.entries if index else ()) if e.platform != platform)
    return RefIndex(r.name, r.tag, kept) if kept else None


def gc(store_url: str, *, dry_run: bool = False, older_than: float = GC_MIN_AGE_S,
       store_options: dict | None = None) -> GcReport:
    """Collect what no ref of the store reaches and is at least ``older_than`` seconds old; the report says what was
    deleted (or would be, with ``dry_run``) and how many objects were kept, and why."""
    with open_store(store_url, **(store_options or {})) as st:
        return st.gc(dry_run=dry_run, older_than=older_than)
