"""Pull: read the ref, pick the entry whose platform is this machine's (:func:`cachetool.refs.choice.select_entry`,
or a :class:`CacheMissError` naming what differs for each entry), and hand a :class:`StoreSource` to
:func:`cachetool.install.install_bundle`, which verifies the signature and runs preflight before it asks for any
blob. The source fetches nothing ahead; its downloads follow the partial-download policy of
:mod:`cachetool.transfer.partials`."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import stat
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from cachetool import bounds
from cachetool.digests import hexof, sha256_bytes, sha256_file
from cachetool.errors import (CachetoolError, StoreError, UnsafeDestinationError, VerificationError,
                              WaitTimeoutError, filled)
from cachetool.cache_root import PARTIAL_DIR
from cachetool.transfer.partials import RETRYABLE, partial_cap, trim_partials
from cachetool.refs.choice import select_entry
from cachetool.refs.opening import open_ref, read_index
from cachetool.stores.addresses import Ref
from cachetool.bundle.source import BundleSource
from cachetool.stores.base import BlobRef, RefEntry, Store
from cachetool.transfer.progress import TransferProgress, progress_default

if TYPE_CHECKING:
    from cachetool.engines.base import Engine, KeyCheckRequest


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
    server_env: dict = dataclasses.field(default_factory=dict)  # what the server must be started with to read it
    compiles_nothing: str | None = None  # an eager server: why; only the units that belong to no key were taken

    def to_dict(self) -> dict:
        d = {k: v for k, v in dataclasses.asdict(self).items() if k != "install"}
        d["install"] = {k: v for k, v in self.install.to_dict().items() if k != "manifest_digest"}
        return d


@dataclasses.dataclass(frozen=True)
class NotNeeded:
    """A pull for a server that compiles no graph (``--enforce-eager``, ``-O0``, compilation mode 0) of a bundle
    that holds nothing such a server reads (no folder outside the key folders: vLLM's Triton kernels, its model
    inspection): nothing is installed."""

    ref: str
    reason: str  # the engine's: what makes the server compile nothing
    seconds: float

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class PullRequest:
    """One pull, every option settled by the caller (:func:`cachetool.api.pull` builds it; the init-container
    policy, :func:`cachetool.transfer.pull_policy.pull_with_policy`, runs it). ``engine``: the server's, whose bundles
    alone the platform choice takes (another engine's bundle is a miss: this server would not read it);
    ``key``: the server's key question, asked of the engine at the start of the pull (under the policy's
    timeout and signals), or None."""

    ref: str | Ref
    cache_root: Path
    engine: Engine
    key: KeyCheckRequest | None = None
    trust: Any = None
    insecure_skip_verify: bool = False
    ranks: Any = None
    device: str | None = None
    force: bool = False
    keep_changed: bool = False
    preflight: bool = True
    store: Store | None = None
    store_options: dict | None = None
    timeout: float | None = None
    progress: bool | None = None
    workers: int | None = None
    warn: Callable[[str], None] | None = None


class StoreSource(BundleSource):
    """A bundle in a store, read lazily: manifest and signature first, each blob only when the installer asks."""

    def __init__(self, store: Store, ref: Ref, entry: RefEntry, partial_dir: Path, *,
                 deadline: float | None = None, on_blob: Callable[[BlobRef], None] | None = None):
        self.store = store
        self.entry = entry
        self.fields = {"store": store.url, "ref": ref.url}  # of every error this source raises itself
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
            raise WaitTimeoutError(f"pull of {self.description} ran past --timeout", **self.fields)

    def manifest_bytes(self) -> bytes:
        if self._manifest is None:
            self._check_deadline()
            data = self.store.get_manifest(self.entry.manifest_digest)
            if sha256_bytes(data) != self.entry.manifest_digest:
                raise VerificationError(f"{self.description}: the manifest in the store does not match its digest",
                                        key=self.entry.manifest_digest, **self.fields)
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
                f"{self.partial_dir} is a symlink or not a folder; refusing to download through it",
                key=blob.stored_digest, path=str(self.partial_dir), **self.fields)
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


def pull(request: PullRequest) -> PullResult | NotNeeded:
    """Resolve the ref, pick this machine's bundle for the server's engine, and install it into the cache root
    (see the module docstring), in named phases: the arguments (device, pinned keys, the engine's key question),
    the entry, then the install from a lazy :class:`StoreSource`. For a server that compiles no graph only the
    units that belong to no key are installed (:class:`NotNeeded` where there are none). ``request.timeout``:
    seconds for the whole pull
    (:class:`WaitTimeoutError` past it)."""
    with bounds.applied(bounds.Bound.timeout(request.timeout)):  # every download's chunks and retry waits, every thread
        return _pull(request)


def _pull(request: PullRequest) -> PullResult | NotNeeded:
    from cachetool.bundle.fingerprint import require_device

    t0 = time.monotonic()
    deadline = t0 + request.timeout if request.timeout else None
    # the arguments, before any request: the server's (its model and config, refused in one line), the device,
    # the pinned keys (a missing key file is a usage error)
    if notice := request.engine.notice():  # an untested engine release: said first, the pull goes on
        (request.warn or logging.getLogger("cachetool.pull").warning)(f"warning: {notice}")
    key_check = request.engine.key_check(request.key) if request.key is not None else None
    device = require_device(request.device)
    trust = request.trust
    if not request.insecure_skip_verify:
        from cachetool.bundle.trust import load_trusted_keys

        trust = load_trusted_keys(trust)
    r, st, own_store = open_ref(request.ref, request.store, request.store_options)
    root = Path(request.cache_root).expanduser()
    try:
        down0 = st.counters.bytes_down
        try:
            entry = select_entry(read_index(st, r), r.url, device, request.engine)
        except CachetoolError as exc:
            raise filled(exc, store=st.url, ref=r.url)
        src, result = _install_entry(request, st, r, entry, root, trust=trust, device=device,
                                     key_check=key_check, deadline=deadline)
        down1 = st.counters.bytes_down
        eager = key_check.compiles_nothing if key_check is not None else None
        if eager and not result.units_installed and not result.units_present:
            return NotNeeded(ref=r.url, reason=eager, seconds=time.monotonic() - t0)
        return PullResult(ref=r.url, manifest_digest=entry.manifest_digest, platform=entry.platform,
                          blobs_downloaded=src.downloaded, blobs_resumed=src.resumed, blobs_reused=src.reused,
                          bytes_downloaded=down1 - down0, install=result, seconds=time.monotonic() - t0,
                          server_env=request.engine.server_environment(root.resolve()), compiles_nothing=eager)
    finally:
        if own_store:
            st.close()


def _install_entry(request: PullRequest, st: Store, r: Ref, entry: RefEntry, root: Path, *, trust: Any,
                   device: str | None, key_check: Any, deadline: float | None) -> tuple[StoreSource, Any]:
    """Install ``entry`` from the store through a lazy source, with the progress bar; the source and the result."""
    from cachetool.install import install_bundle

    partial = root / PARTIAL_DIR
    with TransferProgress(progress_default(request.progress)) as prog:
        if prog.enabled:
            # The entry's size is the blobs' stored bytes plus the manifest's (push): the bar counts the blobs,
            # made on the first one, once the manifest is read; it ends at what was fetched (finish below).
            holder: dict = {}
            lock = threading.Lock()

            def on_blob(b: BlobRef) -> None:
                with lock:
                    if "task" not in holder:
                        holder["task"] = prog.task(f"pull {r.name}:{r.tag} [{entry.platform}]",
                                                   entry.size - len(src.manifest_bytes()))
                prog.advance(holder["task"], b.stored_size)
        else:
            on_blob = None
        src = StoreSource(st, r, entry, partial, deadline=deadline, on_blob=on_blob)
        try:
            result = install_bundle(src, root, trust=trust, insecure_skip_verify=request.insecure_skip_verify,
                                    ranks=request.ranks, preflight=request.preflight, device=device,
                                    key_check=key_check, force=request.force, keep_changed=request.keep_changed,
                                    warn=request.warn, workers=request.workers, deadline=deadline)
        except CachetoolError as exc:  # the partial files were settled under the root lock (StoreSource.settle)
            # the root itself is not ours to remove: install_bundle removes it again only if it created it
            _remove_if_empty(partial)
            # Every install-phase refusal (signature, manifest, preflight, plan, blob, commit, the lock) is of
            # this bundle: a raise below that did not know the store, ref or manifest says so on the way up.
            raise filled(exc, store=st.url, ref=r.url, key=entry.manifest_digest)
        if prog.enabled and "task" in holder:
            prog.finish(holder["task"])
    return src, result


def _remove_if_empty(p: Path) -> None:
    try:
        p.rmdir()
    except OSError:
        pass
