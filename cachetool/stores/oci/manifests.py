"""What the OCI store learns about bundle manifests as it reads and writes them: the OCI manifest that carries each
(its digest is what a tag's index and a signature's ``subject`` name), and where its blobs are (which pack holds
which blob), for the pulls that follow. A bundle manifest itself is the config blob of its OCI manifest."""

from __future__ import annotations

import threading

from cachetool.digests import BlobRef
from cachetool.errors import CachetoolError, NotFoundError, StoreError, filled
from cachetool.stores.oci import packs
from cachetool.stores.oci.repository import Repository


class BundleManifests:
    """Bundle manifest digest -> its OCI manifest and pack layout, learned from tags read and manifests written."""

    def __init__(self, repository: Repository):
        self.repository = repository
        self._lock = threading.Lock()
        self._oci: dict[str, tuple[str, int]] = {}  # bundle manifest digest -> (OCI manifest digest, size)
        self._layouts: dict[str, packs.PackIndex] = {}  # bundle manifest digest -> where its blobs are
        self._members: dict[str, dict[str, BlobRef]] = {}  # bundle digest -> pack member name -> blob
        self._blob_bundle: dict[str, str] = {}  # stored digest -> bundle manifest digest (pulls with packs)

    def remember(self, manifest_digest: str, oci: str, size: int, layers: list) -> None:
        idx = packs.PackIndex()
        idx.add_layers(layers)
        with self._lock:
            self._oci[manifest_digest] = (oci, size)
            self._layouts[manifest_digest] = idx

    def oci_of(self, manifest_digest: str) -> tuple[str, int]:
        """(digest, size) of the OCI manifest of a bundle this store has read or written."""
        url = self.repository.url
        if manifest_digest not in self._oci:
            raise StoreError(
                f"{url}: no OCI manifest known for bundle {manifest_digest[:19]} "
                "(read it through a tag or an OCI digest pin)",
                store=url,
                key=manifest_digest,
            )
        return self._oci[manifest_digest]

    def get(self, manifest_digest: str) -> bytes:
        """The bundle manifest's bytes; for a bundle with packs, note which blob each pack member is."""
        url = self.repository.url
        what = f"download manifest {manifest_digest[:19]} from {url}"
        try:
            data = self.repository.get_blob_bytes(manifest_digest, what, limit=512 << 20)
        except NotFoundError as exc:
            raise NotFoundError(
                f"manifest {manifest_digest[:19]} is missing from store {url}",
                store=url,
                key=manifest_digest,
                status=exc.status,
            ) from None
        if self._layouts.get(manifest_digest):  # which pack holds which blob comes from this manifest's blob list
            from cachetool.bundle.manifest import stored_summary

            try:
                man = stored_summary(data)
            except CachetoolError as exc:  # stored under the digest (checked), yet not a bundle manifest
                filled(exc, store=url, key=manifest_digest)
                raise
            with self._lock:
                self._members[manifest_digest] = {packs.member_name(b): b for b in man.blobs}
                for b in man.blobs:
                    self._blob_bundle[b.stored_digest] = manifest_digest
        return data

    def pack_holding(self, blob: BlobRef) -> tuple[packs.PackLayer, dict[str, BlobRef]] | None:
        """The pack a read bundle keeps ``blob`` in, with that bundle's pack members; None: a layer of its own."""
        bundle = self._blob_bundle.get(blob.stored_digest)
        layout = self._layouts.get(bundle) if bundle else None
        if not layout or blob.digest in layout.singles:
            return None
        pack = layout.pack_of(blob.digest)
        return None if pack is None else (pack, self._members[bundle])  # type: ignore[index]  # baseline (issue 46)
