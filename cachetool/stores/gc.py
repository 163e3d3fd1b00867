"""Garbage collection, the parts every store shares: the typed report and what refs reach (the mark phase)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from cachetool.digests import hexof
from cachetool.errors import CachetoolError, NotFoundError, filled


@dataclasses.dataclass(frozen=True)
class GcReport:
    """What a gc deleted (or, with ``dry_run``, would delete) and how many objects it kept, by reason."""

    store: str
    dry_run: bool
    older_than: float
    deleted: tuple[str, ...] = ()  # store-relative names: "blobs/sha256/<hex>", "tag sha256-<hex>"
    kept_reachable: int = 0  # a ref reaches them
    kept_young: int = 0  # no ref reaches them, but they were written less than older_than seconds ago
    kept_foreign: int = 0  # written by other tools (OCI referrers that are not our signatures)

    @property
    def kept(self) -> int:
        return self.kept_reachable + self.kept_young + self.kept_foreign

    def to_json(self) -> dict:
        return {
            "store": self.store,
            "dry_run": self.dry_run,
            "older_than": self.older_than,
            "deleted": list(self.deleted),
            "kept": self.kept,
            "kept_reachable": self.kept_reachable,
            "kept_young": self.kept_young,
            "kept_foreign": self.kept_foreign,
        }


def reachable(store, indexes: Iterable) -> tuple[set[str], set[str]]:
    """(hex of every manifest the ref indexes name, hex of the stored digest of every blob those manifests list).

    A manifest that is missing keeps nothing alive but does not stop the collection; one that is not a manifest
    stops it, naming the store and the manifest. Only each manifest's blob table is read
    (:func:`~cachetool.bundle.manifest.stored_summary`): a bundle of a layout or schema this cachetool does not know
    keeps its blobs all the same.
    """
    from cachetool.bundle.manifest import stored_summary

    manifests: set[str] = set()
    blobs: set[str] = set()
    for index in indexes:
        for e in index.entries:
            manifests.add(hexof(e.manifest_digest))
    for m in sorted(manifests):
        try:
            man = stored_summary(store.get_manifest("sha256:" + m))
        except NotFoundError:
            continue
        except CachetoolError as exc:
            filled(exc, store=store.url, key="sha256:" + m)
            raise
        for b in man.blobs:
            blobs.add(hexof(b.stored_digest))
    return manifests, blobs
