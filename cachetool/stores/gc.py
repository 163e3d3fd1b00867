"""What a store's refs reach: the garbage collectors of the file and S3 stores keep exactly this."""

from __future__ import annotations

from cachetool.errors import NotFoundError
from cachetool.digests import hexof


def reachable(store) -> tuple[set[str], set[str]]:
    """(hex of every manifest a ref names, hex of the stored digest of every blob those manifests list).

    A manifest that is missing or unreadable keeps nothing alive but does not stop the collection.
    """
    from cachetool.manifest import Manifest

    manifests: set[str] = set()
    blobs: set[str] = set()
    for index in store.list_refs():
        for e in index.entries:
            manifests.add(hexof(e.manifest_digest))
    for m in sorted(manifests):
        try:
            man = Manifest.from_bytes(store.get_manifest("sha256:" + m))
        except NotFoundError:
            continue
        for b in man.blobs:
            blobs.add(hexof(b.stored_digest))
    return manifests, blobs
