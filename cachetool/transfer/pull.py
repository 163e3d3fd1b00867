"""Pull: read the ref, pick the entry whose platform is this machine's (:func:`cachetool.refs.choice.select_entry`,
or a :class:`CacheMissError` naming what differs for each entry), and hand a lazy
:class:`~cachetool.transfer.store_source.StoreSource` to :func:`cachetool.install.install_bundle`, which verifies the
signature and runs preflight before it asks for any blob. The source fetches nothing ahead; its downloads follow the
partial-download policy of :mod:`cachetool.transfer.partials`."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any

from cachetool import bounds
from cachetool.cache_root import PARTIAL_DIR, CacheRoot
from cachetool.errors import CachetoolError, filled
from cachetool.install.options import InstallOptions
from cachetool.refs.choice import select_entry
from cachetool.refs.opening import open_ref, read_index
from cachetool.stores.addresses import Ref
from cachetool.stores.base import BlobRef, RefEntry, Store
from cachetool.transfer.progress import TransferProgress, progress_default
from cachetool.transfer.pull_engine import PullEngine
from cachetool.transfer.store_source import StoreSource, remove_if_empty


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

    def to_json(self) -> dict:
        d = {k: v for k, v in dataclasses.asdict(self).items() if k != "install"}
        d["install"] = {k: v for k, v in self.install.to_json().items() if k != "manifest_digest"}  # type: ignore[attr-defined]  # baseline (issue 46)
        return d


@dataclasses.dataclass(frozen=True)
class NotNeeded:
    """A pull for a server that compiles no graph (``--enforce-eager``, ``-O0``, compilation mode 0) of a bundle
    that holds nothing such a server reads (no folder outside the key folders: vLLM's Triton kernels, its model
    inspection): nothing is installed."""

    ref: str
    reason: str  # the engine's: what makes the server compile nothing
    seconds: float

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PullRequest(InstallOptions):
    """One pull, every option settled (:func:`cachetool.api.pull_request` builds it, the CLI once per ``pull``; the
    init-container policy, :func:`cachetool.transfer.pull_policy.pull_with_policy`, runs it). A pull is an install
    from a store: the install's options and their defaults are :class:`InstallOptions`', handed on to the install as
    they are; ``engine``: the server's, whose bundles alone the platform choice takes (another engine's bundle is a
    miss: this server would not read it); ``key_request``: the server's key question, asked of the engine at the
    start of the pull (under the policy's timeout and signals), or None."""

    ref: str | Ref
    cache_root: CacheRoot
    engine: PullEngine
    key_request: Any = None  # the engine's own key-check request, handed to ``engine.key_check`` as it is
    store: Store | None = None
    store_options: dict | None = None
    timeout: float | None = None  # seconds for the whole pull
    progress: bool | None = None  # the progress bar (default: when stderr is a terminal)


def pull(request: PullRequest, *, abandoned: threading.Event | None = None) -> PullResult | NotNeeded:
    """Resolve the ref, pick this machine's bundle for the server's engine, and install it into the cache root
    (see the module docstring), in named phases: the arguments (device, pinned keys, the engine's key question),
    the entry, then the install from a lazy :class:`StoreSource`. For a server that compiles no graph only the
    units that belong to no key are installed (:class:`NotNeeded` where there are none). ``request.timeout``:
    seconds for the whole pull, a :class:`cachetool.bounds.Bound` applied to it (the one way a time limit reaches
    the layers below: no deadline is passed down): every download's chunks, retry waits, blob expansions and the
    wait for the root's lock end at it, in every thread. Some of a pull cannot look at a bound (the engine's key
    check and the preflight import torch; a store request may never answer), so the pull runs under
    :func:`cachetool.bounds.finish_within`: past the bound it ends in :class:`WaitTimeoutError` naming the phase that
    was running, within :data:`cachetool.bounds.UNWIND_SECONDS`, whatever that phase was doing (``abandoned`` is
    set where such a phase had to be left running)."""
    bound = bounds.Bound.timeout(request.timeout)
    with bounds.applied(bound):
        return bounds.finish_within(bound, lambda: _pull(request), "pull", abandoned)


def _pull(request: PullRequest) -> PullResult | NotNeeded:
    from cachetool.bundle.fingerprint import require_device

    t0 = time.monotonic()
    # the arguments, before any request: the server's (its model and config, refused in one line), the device,
    # the pinned keys (a missing key file is a usage error)
    if notice := request.engine.notice():  # an untested engine release: said first, the pull goes on
        (request.warn or logging.getLogger("cachetool.pull").warning)(f"warning: {notice}")
    with bounds.phase("the server's key check"):
        key_check = request.engine.key_check(request.key_request) if request.key_request is not None else None
    device = require_device(request.device)
    trust = request.trust
    if not request.insecure_skip_verify:
        from cachetool.bundle.trust import load_trusted_keys

        trust = load_trusted_keys(trust)
    with bounds.phase("the opening of the store"):
        r, st, own_store = open_ref(request.ref, request.store, request.store_options)
    root = request.cache_root
    try:
        down0 = st.counters.bytes_down
        try:
            with bounds.phase(f"the read of {r.url} from the store"):
                entry = select_entry(read_index(st, r), r.url, device, request.engine)
        except CachetoolError as exc:
            filled(exc, store=st.url, ref=r.url)
            raise
        src, result = _install_entry(request, st, r, entry, root, trust=trust, device=device, key_check=key_check)
        down1 = st.counters.bytes_down
        eager = key_check.compiles_nothing if key_check is not None else None
        if eager and not result.units_installed and not result.units_present:
            return NotNeeded(ref=r.url, reason=eager, seconds=time.monotonic() - t0)
        return PullResult(
            ref=r.url,
            manifest_digest=entry.manifest_digest,
            platform=entry.platform,
            blobs_downloaded=src.downloaded,
            blobs_resumed=src.resumed,
            blobs_reused=src.reused,
            bytes_downloaded=down1 - down0,
            install=result,
            seconds=time.monotonic() - t0,
            server_env=request.engine.server_environment(root.resolved),
            compiles_nothing=eager,
        )
    finally:
        if own_store:
            st.close()


def _install_entry(
    request: PullRequest,
    st: Store,
    r: Ref,
    entry: RefEntry,
    root: CacheRoot,
    *,
    trust: Any,
    device: str | None,
    key_check: Any,
) -> tuple[StoreSource, Any]:
    """Install ``entry`` from the store through a lazy source, with the progress bar; the source and the result."""
    from cachetool.install import install_bundle

    partial = root.path / PARTIAL_DIR
    with TransferProgress(progress_default(request.progress)) as prog:
        if prog.enabled:
            # The entry's size is the blobs' stored bytes plus the manifest's (push): the bar counts the blobs,
            # made on the first one, once the manifest is read; it ends at what was fetched (finish below).
            holder: dict = {}
            lock = threading.Lock()

            def on_blob(b: BlobRef) -> None:
                with lock:
                    if "task" not in holder:
                        holder["task"] = prog.task(
                            f"pull {r.name}:{r.tag} [{entry.platform}]", entry.size - len(src.manifest_bytes())
                        )
                prog.advance(holder["task"], b.stored_size)
        else:
            on_blob = None  # type: ignore[assignment]  # baseline (issue 46)
        src = StoreSource(st, r, entry, partial, on_blob=on_blob)
        try:
            # the install's own phases (the manifest's read, the preflight) name themselves within this one
            with bounds.phase(f"the install of {r.url} [{entry.platform}] (root lock, blob downloads, staging)"):
                # the request's install options as given, but the trusted keys loaded and the device checked
                result = install_bundle(
                    src, root, request.install_options(trust=trust, device=device), key_check=key_check
                )
        except CachetoolError as exc:  # the partial files were settled under the root lock (StoreSource.settle)
            # the root itself is not ours to remove: install_bundle removes it again only if it created it
            remove_if_empty(partial)
            # Every install-phase refusal (signature, manifest, preflight, plan, blob, commit, the lock) is of
            # this bundle: a raise below that did not know the store, ref or manifest says so on the way up.
            filled(exc, store=st.url, ref=r.url, key=entry.manifest_digest)
            raise
        if prog.enabled and "task" in holder:
            prog.finish(holder["task"])
    return src, result
