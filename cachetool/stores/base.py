"""The one interface every store implements (file://, s3://, oci://).

A store holds bundles in their *store form*, content-addressed:

- blobs: the zstd-compressed content of one cache file, addressed by :class:`BlobRef` (the sha256 of the
  uncompressed content, plus the sha256 and size of the stored zstd bytes, which an OCI registry needs as
  the layer digest);
- manifests: the bundle manifest's canonical JSON bytes, addressed by their sha256 ("manifest digest");
- signatures: the DSSE envelope over a manifest, stored next to the manifest it signs;
- refs: ``name:tag`` → a :class:`RefIndex`, one entry per platform (multi-platform tags).

Write order on push is blobs → manifest → signature (one :meth:`PushSession.commit`) → ref, so a reader that
sees a ref can always fetch everything it names. A push is a session (:meth:`Store.push`): it holds that push's own
state (on OCI its plan of packs), so two pushes through one store object never mix. Implementations raise subclasses of :mod:`cachetool.errors`
(``NotFoundError`` for a missing ref/bucket/repository/blob, ``StoreError`` for transport failures and
bad credentials), each with a one-line message naming the store URL and the object, and every field it knows:
``store`` (the store URL), ``ref`` (``name:tag`` or ``name@sha256:...``), ``key`` (the object: a key, a digest)
and ``status`` (the HTTP status or S3 error code), which ``--json`` prints.

What is the same on every backend (tests/stores/test_store_interface.py runs it over all three):

- ``counters``: a :class:`TransferCounters` of the bytes moved, which push/pull results report;
- resume: ``get_blob`` into a partial ``dest`` keeps its bytes and asks for the rest (``blobs_resumed``);
- gc: deletes what no ref reaches and was written at least ``older_than`` seconds ago (default
  :data:`GC_MIN_AGE_S` in the library and the CLI alike), stops before deleting anything when a ref cannot be
  read, is idempotent, and returns a :class:`GcReport` (deleted; kept as reachable, as young, as foreign).
  ``capabilities.gc_deletes`` says which kinds of object that covers: a registry keeps blobs and untagged manifests
  to its own garbage collection.
"""

from __future__ import annotations

import abc
import dataclasses
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from cachetool.digests import BlobRef, read_fetched
from cachetool.errors import UsageError
from cachetool.stores.gc import GcReport

GC_MIN_AGE_S = 3600.0  # gc spares objects younger than this: a push in flight writes blobs before its ref


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a backend does natively (declared by each store, so callers need not probe with ``hasattr``)."""

    gc_deletes: frozenset  # kinds gc deletes: "blobs", "manifests", "signatures"
    ref_update: str  # how update_ref keeps concurrent writers' entries: "lock", "conditional" or "converge"
    resumable_downloads: bool = True  # get_blob continues a partial dest
    # read_blob reads an object in place (a local folder): a pull reads a small blob whole, keeping no partial file
    # for a rerun, which reads it again as cheaply
    local_reads: bool = False


class TransferCounters:
    """Bytes moved by a store and blobs resumed, thread-safe; read by transfer results and the benchmark."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.bytes_up = 0
        self.bytes_down = 0
        self.blobs_resumed = 0

    def up(self, n: int) -> None:
        with self._lock:
            self.bytes_up += n

    def down(self, n: int) -> None:
        with self._lock:
            self.bytes_down += n

    def resumed(self) -> None:
        with self._lock:
            self.blobs_resumed += 1


@dataclasses.dataclass(frozen=True)
class RefEntry:
    """One platform's bundle under a tag."""

    manifest_digest: str  # "sha256:<hex>" of the manifest's canonical bytes
    platform: str  # short platform key, e.g. "cuda-sm90-torch2.11.0+cu130" or "cpu-x86_64-torch2.13.0+cpu"
    fingerprint: dict  # the manifest's environment fingerprint, for ls and for "why none matches"
    size: int  # stored bytes of all blobs + manifest
    created: str  # ISO-8601 UTC


@dataclasses.dataclass(frozen=True)
class RefIndex:
    name: str
    tag: str
    entries: tuple[RefEntry, ...]


@dataclasses.dataclass(frozen=True)
class StoredManifest:
    """What :meth:`PushSession.commit` wrote: the bundle manifest's digest, and the digest a pin of this bundle
    names in this store (``ref@sha256:...``: the bundle manifest's on file and S3, the OCI manifest's on OCI)."""

    digest: str
    pin: str


class PushSession(abc.ABC):
    """One push's writes to a store, from :meth:`Store.push` to :meth:`commit`; a context manager::

        with store.push(blobs, blob_path) as p:
            for blob in p.missing():
                p.put_blob(blob)
            stored = p.commit(manifest_bytes, signature)

    Its state is its own (not the store's), so pushes through one store object, from threads, never see each
    other's. Leaving the ``with`` without :meth:`commit` aborts: the session's scratch goes, no manifest is written,
    and the blobs it uploaded stay, for a rerun to skip (gc collects them if no ref comes), except after a full file
    system (:class:`~cachetool.errors.DiskFullError`, a folder store's): then the session removes what it wrote, the
    space the store needs back. Blobs it found already there (maybe another push's) are never removed. A session that
    committed or aborted refuses further calls. ``put_blob`` may be called from threads."""

    def __init__(self, store_url: str, blobs: list[BlobRef], blob_path: Callable[[BlobRef], Path]):
        self.store_url = store_url
        self.blobs = list({b.stored_digest: b for b in blobs}.values())  # unique by stored digest, in order
        self.blob_path = blob_path
        self.state = "open"  # then "committed", "failed" (commit raised) or "aborted"

    def missing(self, *, workers: int = 8) -> list[BlobRef]:
        """The session's blobs that the store lacks, in order: exactly what to :meth:`put_blob` (a re-push of
        unchanged content uploads nothing). Ask once, first: a backend answers in bulk (``workers`` checks at a
        time), and OCI groups small blobs into packs here."""
        self._check_open("ask what is missing")
        return self._missing(workers)

    def put_blob(self, blob: BlobRef) -> None:
        """Upload the zstd bytes of ``blob`` (one :meth:`missing` named) from ``blob_path(blob)``."""
        self._check_open("upload a blob")
        self._put_blob(blob)

    def commit(self, manifest_bytes: bytes, signature: bytes | None = None) -> StoredManifest:
        """Store the manifest, then its DSSE ``signature`` if given (a reader that finds the signature finds the
        manifest it signs), and close the session. Call after the blobs, before the ref."""
        self._check_open("commit")
        self.state = "failed"  # until it has committed: a failed commit is not tried again on this session
        try:
            stored = self._commit(manifest_bytes, signature)
            self.state = "committed"
            return stored
        finally:
            self._discard()

    def abort(self) -> None:
        """Give up this push: no manifest is written; the session's scratch goes. Idempotent."""
        if self.state == "open":
            self.state = "aborted"
            self._discard()

    def _check_open(self, what: str) -> None:
        if self.state != "open":
            raise UsageError(
                f"push to {self.store_url}: cannot {what}: the push session has {self.state}", store=self.store_url
            )

    def __enter__(self) -> PushSession:
        return self

    def __exit__(self, *exc) -> None:
        self.abort()

    # what each backend implements
    @abc.abstractmethod
    def _missing(self, workers: int) -> list[BlobRef]: ...

    @abc.abstractmethod
    def _put_blob(self, blob: BlobRef) -> None: ...

    @abc.abstractmethod
    def _commit(self, manifest_bytes: bytes, signature: bytes | None) -> StoredManifest: ...

    def _discard(self) -> None:
        """Drop the session's scratch (after commit or abort)."""


class Store(abc.ABC):
    """A place bundles live. Construct through :func:`cachetool.stores.open_store`.

    What push, pull, ``ls``/``rm``/``gc`` and the readers call, and nothing more: a push opens a session with
    :meth:`push` (asks what is missing, uploads it, commits manifest and signature) and then calls
    :meth:`update_ref`; a pull reads :meth:`get_ref`, :meth:`get_manifest`, :meth:`get_signature` and each blob
    with :meth:`get_blob` (a small one with :meth:`read_blob`)."""

    url: str
    counters: TransferCounters  # set by each store's constructor
    capabilities: Capabilities  # declared by each store class

    # writing a bundle
    @abc.abstractmethod
    def push(self, blobs: list[BlobRef], blob_path: Callable[[BlobRef], Path]) -> PushSession:
        """A session for one push of a bundle with these ``blobs``, whose stored (zstd) bytes are at
        ``blob_path(blob)``."""

    # blobs
    @abc.abstractmethod
    def get_blob(self, blob: BlobRef, dest: Path) -> None:
        """Download the zstd bytes to ``dest`` (may resume a partial ``dest``). Does not decompress."""

    def read_blob(self, blob: BlobRef, scratch_dir: Path) -> bytes:
        """The zstd bytes of a small blob in memory (never more than ``blob.stored_size``; nothing to resume). Does
        not decompress. By default :meth:`get_blob` into a file in ``scratch_dir`` (a folder of the caller's),
        removed again; a store with ``capabilities.local_reads`` reads the object in place."""
        return read_fetched(blob, lambda dest: self.get_blob(blob, dest), scratch_dir)

    # manifests and their signatures
    @abc.abstractmethod
    def get_manifest(self, manifest_digest: str) -> bytes: ...

    @abc.abstractmethod
    def get_signature(self, manifest_digest: str) -> bytes | None:
        """The DSSE envelope, or None when the manifest is unsigned."""

    # refs
    @abc.abstractmethod
    def get_ref(self, name: str, tag: str, *, digest: str | None = None) -> RefIndex:
        """The tag's index; NotFoundError when there is no such tag (or store, bucket, repository).

        With ``digest`` (a pin, ``name@sha256:...``; the tag is then only a label) a one-entry index of exactly the
        bundle with that digest: on file and S3 the bundle manifest's, on OCI the OCI manifest's or an index's
        (:attr:`StoredManifest.pin`)."""

    @abc.abstractmethod
    def update_ref(self, name: str, tag: str, update: Callable[[RefIndex | None], RefIndex | None]) -> RefIndex | None:
        """The one way to change a ref: read-modify-write of the tag's index. ``update`` gets the current index
        (None when the tag does not exist) and returns the new one; None, or an index without entries, removes the
        tag. ``update`` may raise to change nothing, and must be idempotent (a store may call it again after another
        writer got in). Returns what the tag holds afterwards (None: removed).

        Every ref change (push merging its platform, ``rm``, ``rm --platform``) goes through here so that two
        writers of one tag never lose each other's entries (``capabilities.ref_update`` says how)."""

    @abc.abstractmethod
    def list_refs(self) -> Iterator[RefIndex]: ...

    @abc.abstractmethod
    def gc(self, dry_run: bool = False, older_than: float = GC_MIN_AGE_S) -> GcReport:
        """Delete the objects of the kinds in ``capabilities.gc_deletes`` that no ref reaches; report what was (or
        would be) deleted and what was kept, and why. A ref that cannot be read stops the collection before
        anything is deleted.

        ``older_than``: only objects last written at least this many seconds ago, so that a push in flight
        (blobs written, ref not yet) is not collected under it."""

    def close(self) -> None:
        """Release connections. Stores are also usable as context managers."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
