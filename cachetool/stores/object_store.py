"""The bundle store of every object backend (file://, s3://): one key layout, one ref update, one gc.

Keys (docs/stores.md; the same under a folder and under a bucket prefix)::

    blobs/sha256/<hex>                    zstd bytes of one blob; <hex> = sha256 of these stored bytes
    manifests/sha256/<hex>.json           bundle manifest, canonical JSON; <hex> = its sha256
    signatures/sha256/<hex>.dsse.json     DSSE envelope over manifest <hex>
    refs/<name>/<tag>.json                ref index: one entry per platform (an index without entries: removed)

Ref changes are conditional puts (:meth:`ObjectBackend.put_if`): read the index and its version, compute the
update, write only if the version is unchanged, else read and merge again. Where the backend cannot delete
conditionally (S3), removing a tag's last entry writes an empty index, which reads as "not found" and which gc
deletes once it is older than ``older_than``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cachetool.digests import hexof, sha256_bytes
from cachetool.errors import CachetoolError, DiskFullError, NotFoundError, StoreError, filled
from cachetool.retry import pause
from cachetool.stores.base import (
    GC_MIN_AGE_S,
    BlobRef,
    Capabilities,
    PushSession,
    RefEntry,
    RefIndex,
    Store,
    StoredManifest,
)
from cachetool.stores.common import MAX_MANIFEST, MAX_REF, MAX_SIGNATURE, index_from_json, index_to_json
from cachetool.stores.gc import GcReport, reachable
from cachetool.stores.objects import ObjectBackend, ObjectInfo, StoredObject

REF_UPDATE_ATTEMPTS = 20
_KINDS = ("blobs", "manifests", "signatures")  # what gc collects by reachability


def blob_key(blob: BlobRef) -> str:
    return f"blobs/sha256/{hexof(blob.stored_digest)}"


def manifest_key(digest: str) -> str:
    return f"manifests/sha256/{hexof(digest)}.json"


def signature_key(digest: str) -> str:
    return f"signatures/sha256/{hexof(digest)}.dsse.json"


def ref_key(name: str, tag: str) -> str:
    return f"refs/{name}/{tag}.json"


def _stale_temp(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp")  # what a crash mid-write leaves (file backend)


class ObjectStore(Store):
    """A :class:`Store` on an :class:`ObjectBackend`. Built by :class:`cachetool.stores.file.FileStore` and
    :class:`cachetool.stores.s3.S3Store`, which declare ``capabilities``."""

    def __init__(self, backend: ObjectBackend):
        self.backend = backend
        self.url = backend.url
        self.counters = backend.counters

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]  # baseline (issue 46)  # the builders declare the same as a class attribute
        return Capabilities(frozenset(_KINDS), self.backend.ref_update)

    def close(self) -> None:
        self.backend.close()

    # writing a bundle
    def push(self, blobs: list[BlobRef], blob_path: Callable[[BlobRef], Path]) -> PushSession:
        return ObjectPush(self, blobs, blob_path)

    # blobs
    def get_blob(self, blob: BlobRef, dest: Path) -> None:
        self.backend.download(blob_key(blob), blob.stored_size, Path(dest), *self.blob_words(blob))

    def blob_words(self, blob: BlobRef) -> tuple[str, str]:
        """What reading ``blob`` is called in an error, and the NotFoundError message when it is missing."""
        short = blob.stored_digest[:19]
        return f"download blob {short} from {self.url}", f"blob {short} is missing from store {self.url}"

    # manifests and signatures
    def get_manifest(self, manifest_digest: str) -> bytes:
        return self._manifest(manifest_digest, None)

    def _manifest(self, digest: str, ref: str | None) -> bytes:
        got = self.backend.get(manifest_key(digest), MAX_MANIFEST, f"download manifest from {self.url}")
        if got is None:
            raise NotFoundError(
                f"manifest {digest[:19]} is missing from store {self.url}",
                store=self.url,
                ref=ref,
                key=manifest_key(digest),
            )
        return got.data

    def get_signature(self, manifest_digest: str) -> bytes | None:
        got = self.backend.get(signature_key(manifest_digest), MAX_SIGNATURE, f"download signature from {self.url}")
        return None if got is None else got.data

    # refs
    def _where(self, name: str, tag: str) -> str:
        return f"{self.url}/{name}:{tag}"

    def get_ref(self, name: str, tag: str, *, digest: str | None = None) -> RefIndex:
        if digest is not None:
            return self._pinned(name, digest)
        where = self._where(name, tag)
        _, index = self._read_index(name, tag)
        if index is None or not index.entries:
            why = " (no such tag; removed)" if index is not None else self._tags_hint(name)
            raise NotFoundError(f"{where} not found{why}", store=self.url, ref=f"{name}:{tag}", key=ref_key(name, tag))
        return index

    def _read_index(self, name: str, tag: str) -> tuple[StoredObject | None, RefIndex | None]:
        """The ref's object and its index (None, None: no such object); an error names the ref."""
        key, where = ref_key(name, tag), self._where(name, tag)
        fields = {"store": self.url, "ref": f"{name}:{tag}", "key": key}
        try:
            got = self.backend.get(key, MAX_REF, f"read {where}")
        except CachetoolError as exc:
            filled(exc, **fields)
            raise
        return got, None if got is None else index_from_json(got.data, where, **fields)

    def _tags_hint(self, name: str) -> str:
        tags = [i.key[len(f"refs/{name}/") : -5] for i in self.backend.list(f"refs/{name}/") if self._is_ref(i)]
        return f" (no such tag; tags: {', '.join(tags[:8])})" if tags else f" (no such tag; no bundle named {name!r})"

    def _pinned(self, name: str, digest: str) -> RefIndex:
        """Exactly the bundle manifest with that digest, as a one-entry index."""
        from cachetool.bundle.manifest import stored_summary

        ref = f"{name}@{digest}"
        data = self._manifest(digest, ref)
        try:
            man = stored_summary(data)
        except CachetoolError as exc:  # a stored object that is not a bundle manifest
            filled(exc, store=self.url, ref=ref, key=manifest_key(digest))
            raise
        entry = RefEntry(digest, man.platform, dict(man.fingerprint or {}), man.stored_size + len(data), "")
        return RefIndex(name, digest, (entry,))

    def update_ref(self, name: str, tag: str, update: Callable[[RefIndex | None], RefIndex | None]) -> RefIndex | None:
        """Read the index with its version, update, put it only if the version is unchanged; on a conflict read and
        merge again. Concurrent pushes of two platforms to one tag, and ``rm --platform`` beside a push, keep every
        entry."""
        key, where = ref_key(name, tag), self._where(name, tag)
        for attempt in range(REF_UPDATE_ATTEMPTS):
            got, old = self._read_index(name, tag)
            old = old if old is not None and old.entries else None  # an empty index is a removed tag
            new = update(old)
            if new is None or not new.entries:
                if old is None:
                    return None
                new = None
                body = None if self.backend.conditional_delete else index_to_json(RefIndex(name, tag, ()))
            else:
                body = index_to_json(new)
            if self._put_index(name, tag, body, None if got is None else got.version):
                return new
            pause(f"write {where}", attempt, "the ref changed under us", seconds=min(1.0, 0.05 * (attempt + 1)))
        raise StoreError(
            f"write {where}: the ref kept changing under {REF_UPDATE_ATTEMPTS} attempts (concurrent pushes)",
            store=self.url,
            ref=f"{name}:{tag}",
            key=key,
        )

    def _put_index(self, name: str, tag: str, body: bytes | None, version: str | None) -> bool:
        key = ref_key(name, tag)
        try:
            return self.backend.put_if(key, body, version, f"write {self._where(name, tag)}")
        except CachetoolError as exc:
            filled(exc, store=self.url, ref=f"{name}:{tag}", key=key)

            raise

    @staticmethod
    def _is_ref(info: ObjectInfo) -> bool:
        rel = info.key[len("refs/") :]
        return rel.count("/") == 1 and rel.endswith(".json") and not rel.split("/")[1].startswith(".")

    def _ref_objects(self, listing: Iterable[ObjectInfo] | None = None) -> Iterator[tuple[ObjectInfo, RefIndex]]:
        """Every ref object with its index, removed tags (empty indexes) included. An unreadable ref raises."""
        for info in self.backend.list("refs/") if listing is None else listing:
            if not self._is_ref(info):
                continue
            got, index = self._read_index(*info.key[len("refs/") : -5].split("/"))
            if got is not None:  # removed while listing
                yield info, index  # type: ignore[misc]  # baseline (issue 46)

    def list_refs(self) -> Iterator[RefIndex]:
        for _, index in self._ref_objects():
            if index.entries:
                yield index

    # gc
    def gc(self, dry_run: bool = False, older_than: float = GC_MIN_AGE_S) -> GcReport:
        """Mark what the refs reach, then sweep the blobs, manifests and signatures no ref reaches, and the
        housekeeping of refs (removed tags' empty indexes, lock and temp files left by a crash or by an older
        cachetool), each only once it is ``older_than`` seconds old. Every ref is read before anything is
        deleted."""
        self.backend.check()
        listing = list(self.backend.list("refs/"))
        refs = list(self._ref_objects(listing))
        manifests, blobs = reachable(self, (index for _, index in refs))
        cutoff = time.time() - older_than
        doomed: list[str] = []
        reached = young = 0
        candidates = [(info, False) for info, index in refs if not index.entries]  # removed tags
        candidates += [
            (info, False)
            for info in listing  # lock and temp files
            if not self._is_ref(info) and info.key.rsplit("/", 1)[-1].startswith(".")
        ]
        for kind, keep in zip(_KINDS, (blobs, manifests, manifests)):
            for info in self.backend.list(f"{kind}/sha256/"):
                name = info.key.rsplit("/", 1)[-1]
                candidates.append((info, not _stale_temp(name) and name.split(".", 1)[0] in keep))
        for info, is_reached in candidates:
            if is_reached:
                reached += 1
            elif info.mtime > cutoff:
                young += 1
            else:
                doomed.append(info.key)
        if not dry_run:
            # A removed tag may have been pushed again since it was read: read it once more right before the delete
            # (S3 has no conditional delete), so only a push inside these milliseconds could be lost.
            removed = {info.key for info, index in refs if not index.entries}
            doomed = [k for k in doomed if k not in removed or self._still_removed(k)]
            if doomed:
                self.backend.delete(doomed, f"gc {self.url}")
        return GcReport(self.url, dry_run, older_than, tuple(doomed), kept_reachable=reached, kept_young=young)

    def _still_removed(self, key: str) -> bool:
        got = self.backend.get(key, MAX_REF, f"read {self.url}/{key}")
        return got is not None and not index_from_json(got.data, f"{self.url}/{key}").entries


class ObjectPush(PushSession):
    """A push to an object store: it keeps no scratch, and nothing of it is visible before :meth:`commit` writes
    the manifest (blobs are content-addressed, so uploading them early changes no reader). A push that a full file
    system stopped (:class:`~cachetool.errors.DiskFullError`, a folder store's) removes what it wrote when it is
    left without a commit: the space is what the store needs back, and a rerun would upload those blobs anyway.
    Other failures keep them, for a rerun to skip."""

    def __init__(self, store: ObjectStore, blobs: list[BlobRef], blob_path: Callable[[BlobRef], Path]):
        super().__init__(store.url, blobs, blob_path)
        self.store = store
        self._written: list[str] = []  # the keys this session wrote, in order
        self._lock = threading.Lock()  # put_blob runs from threads
        self._full = False  # a write found the store's file system full

    def _put(self, key: str, what: str, **content) -> None:
        """One object written, remembered as this session's; a full file system is remembered too."""
        try:
            self.store.backend.put(key, what, **content)
        except DiskFullError:
            self._full = True
            raise
        with self._lock:
            self._written.append(key)

    def _discard(self) -> None:
        if self._full and self.state != "committed":
            self.store.backend.delete(reversed(self._written), f"remove what the push wrote to {self.store_url}")
            self._written = []

    def _missing(self, workers: int) -> list[BlobRef]:
        """One stat per blob, ``workers`` at a time."""
        with ThreadPoolExecutor(max(1, workers)) as ex:
            present = list(ex.map(self._stored_whole, self.blobs))
        return [b for b, there in zip(self.blobs, present) if not there]

    def _stored_whole(self, blob: BlobRef) -> bool:
        """A truncated object (of the wrong size) counts as missing: the push uploads it again."""
        info = self.store.backend.stat(blob_key(blob))
        return info is not None and info.size == blob.stored_size

    def _put_blob(self, blob: BlobRef) -> None:
        self._put(
            blob_key(blob), f"upload blob {blob.stored_digest[:19]} to {self.store_url}", src=Path(self.blob_path(blob))
        )

    def _commit(self, manifest_bytes: bytes, signature: bytes | None) -> StoredManifest:
        digest = sha256_bytes(manifest_bytes)
        key = manifest_key(digest)
        if self.store.backend.stat(key) is None:  # content-addressed: a re-push writes it once
            self._put(key, f"upload manifest {digest[:19]} to {self.store_url}", data=manifest_bytes)
        if signature is not None:  # after its manifest (the write order)
            self._put(signature_key(digest), f"upload signature to {self.store_url}", data=signature)
        return StoredManifest(digest, digest)
