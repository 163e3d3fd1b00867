"""The object backend: the few operations a bundle store needs from a folder or a bucket (sccache's pattern).

:class:`cachetool.stores.object_store.ObjectStore` holds every bundle concept (the key layout, blobs, manifests,
signatures, refs, gc) once, on top of this interface; :mod:`.file` and :mod:`.s3` only build a backend. A new
object store (GCS, Azure, WebDAV) is a backend of these operations plus its scheme in ``open_store``.

Keys are relative, ``/``-separated (``blobs/sha256/<hex>``), made by the object store from checked digests and ref
names only. A missing *object* is a return value (None); a missing store (folder, bucket) raises
``NotFoundError``, transport failures and refused credentials ``StoreError``, each one line naming the store.
Every byte moved is counted in ``counters``.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Iterable, Iterator
from pathlib import Path

from cachetool.stores.base import TransferCounters


@dataclasses.dataclass(frozen=True)
class ObjectInfo:
    key: str  # relative to the store's root
    size: int
    mtime: float  # last write, seconds since the epoch: gc spares young objects


@dataclasses.dataclass(frozen=True)
class StoredObject:
    data: bytes
    version: str  # opaque; changes whenever the object is rewritten (file: sha256 of the bytes, S3: the ETag)


class ObjectBackend(abc.ABC):
    url: str
    counters: TransferCounters
    ref_update: str  # how put_if is made atomic: "lock" (an flock) or "conditional" (the server's If-Match)
    conditional_delete: bool  # put_if(key, None, version) deletes; else the caller writes an empty object instead

    @abc.abstractmethod
    def check(self) -> None:
        """Raise NotFoundError when the store itself (folder, bucket) is missing, StoreError when it can't be read."""

    @abc.abstractmethod
    def stat(self, key: str) -> ObjectInfo | None:
        """The object's size and age, or None when it is missing (or is not a plain object: a planted link)."""

    @abc.abstractmethod
    def get(self, key: str, limit: int, what: str) -> StoredObject | None:
        """The whole object, refused (VerificationError) past ``limit`` bytes before it is read into memory."""

    @abc.abstractmethod
    def download(self, key: str, size: int, dest: Path, what: str, missing: str) -> None:
        """The object's ``size`` bytes into ``dest``, resuming a partial ``dest`` (a ranged get); never more than
        ``size`` bytes. ``missing``: the NotFoundError message when there is no such object."""

    @abc.abstractmethod
    def put(self, key: str, what: str, *, data: bytes | None = None, src: Path | None = None) -> None:
        """Write ``data`` (or the file ``src``) whole: a reader sees the old object or the new one, never a part."""

    @abc.abstractmethod
    def put_if(self, key: str, data: bytes | None, version: str | None, what: str) -> bool:
        """The conditional put: write ``data`` (None: delete, where ``conditional_delete``) only if the object
        still has ``version`` (None: only if it does not exist). False when another writer got in first."""

    @abc.abstractmethod
    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix`` (a folder: ends with ``/``), in key order. NotFoundError
        when the store itself is missing."""

    @abc.abstractmethod
    def delete(self, keys: Iterable[str], what: str) -> None:
        """Delete these objects; a missing one is no error."""

    def close(self) -> None:
        """Release connections."""
