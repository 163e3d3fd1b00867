"""``oci://host[:port]/repo``: bundles as OCI artifacts in a registry, by the ecosystem's rules.

- A bundle is an OCI image manifest (:mod:`.media`), its small blobs in packs (:mod:`.packs`).
- A tag is an OCI image index of those manifests (one per platform). Reading accepts any wrapping: our index,
  an index a copy rewrote (``skopeo copy --all`` drops artifactType), or a tag that points straight at a bundle
  manifest (``skopeo copy`` without ``--all``). Each child is identified by its own manifest.
- The signature is an OCI 1.1 referrer of the bundle's manifest: pushed by digest with ``subject``; where the
  registry has no referrers API, listed in the referrers tag ``sha256-<hex>`` (an index), as the distribution
  spec says. Read: the referrers API, then that tag, then the ``sha256-<hex>.sig`` tag of older cachetool.
- Pins: ``oci://host/repo@sha256:...`` is the OCI digest of a bundle manifest or of an index.
- Ref updates: registries have no compare-and-swap; see :meth:`.refs.TagRefs.update_ref` for the strategy.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path

from cachetool.errors import CachetoolError, NotFoundError, StoreError, filled
from cachetool.stores.base import Capabilities, BlobRef, Store, StoredManifest, TransferCounters
from cachetool.stores.oci import media, packs
from cachetool.stores.oci.client import RegistryClient
from cachetool.stores.oci.gc import SignatureGc
from cachetool.stores.oci.media import A
from cachetool.stores.oci.refs import TagRefs
from cachetool.stores.oci.repository import RepositoryAccess
from cachetool.stores.oci.signatures import ReferrerSignatures
from cachetool.stores.oci.uploads import BlobTransfer, PushPlan


class OCIStore(BlobTransfer, ReferrerSignatures, TagRefs, SignatureGc, RepositoryAccess, Store):
    """The parts: :mod:`.uploads` (blobs and packs), :mod:`.signatures` (referrers), :mod:`.refs` (tags),
    :mod:`.gc`, :mod:`.repository` (the requests); this class holds the bundle manifests and what they map."""

    capabilities = Capabilities(frozenset({"signatures"}), "converge")  # the registry collects blobs

    def __init__(self, host: str, repo: str, *, insecure: bool = False, plain_http: bool = False,
                 max_attempts: int | None = None, timeout: tuple[float, float] = (10.0, 120.0)):
        self.host = host
        self.repo = repo
        self.insecure = insecure
        self.url = f"oci://{host}/{repo}" if repo else f"oci://{host}"
        self._opts = {"insecure": insecure, "plain_http": plain_http, "max_attempts": max_attempts, "timeout": timeout}
        self.client = RegistryClient(host, repo, plain_http=plain_http, verify=not insecure, max_attempts=max_attempts,
                                     timeout=timeout, store_url=self.url)
        self.max_attempts = self.client.max_attempts
        self.counters = TransferCounters()
        self._lock = threading.Lock()
        self._oci: dict[str, tuple[str, int]] = {}  # bundle manifest digest -> (OCI manifest digest, size)
        self._layouts: dict[str, packs.PackIndex] = {}  # bundle manifest digest -> where its blobs are
        self._entries: dict[str, tuple[str, dict, int]] = {}  # OCI digest -> (platform, fingerprint, size)
        self._blob_bundle: dict[str, str] = {}  # stored digest -> bundle manifest digest (pulls with packs)
        self._members: dict[str, dict[str, BlobRef]] = {}  # bundle digest -> pack member name -> blob
        # a push's blob set -> the open plans of the pushes of that set (one per push, from missing_blobs to its
        # manifest)
        self._push_plans: dict[frozenset[str], list[PushPlan]] = {}
        self._head_cache: dict[str, bool] = {}
        self._pack_locks: dict[str, threading.Lock] = {}
        self._scratch: str | None = None

    @property
    def base(self) -> str:
        return self.client.base

    @property
    def plain_http(self) -> bool:
        return self.client.base.startswith("http://")

    def close(self) -> None:
        self.client.close()
        with self._lock:
            self._push_plans.clear()  # their pack files go with the scratch folder
        if self._scratch:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def _close_plan(self, blobs: frozenset[str]) -> PushPlan | None:
        """The plan of a push of ``blobs`` whose manifest is being written, removed: a later push's put_blob must
        not upload its packs. None where that push planned nothing (no missing_blobs)."""
        with self._lock:
            open_plans = self._push_plans.get(blobs)
            if not open_plans:
                return None
            plan = open_plans.pop()
            if not open_plans:
                del self._push_plans[blobs]
            return plan

    def _scratch_dir(self) -> Path:
        with self._lock:
            if self._scratch is None:
                self._scratch = tempfile.mkdtemp(prefix="cachetool-oci-")
        return Path(self._scratch)

    def put_manifest(self, manifest_bytes: bytes, blobs: list[BlobRef],
                     signature: bytes | None = None) -> StoredManifest:
        """The bundle manifest as a blob (the config), the OCI manifest listing the layers, then the signature as a
        referrer of it. The pin is the OCI manifest's digest (what docker, skopeo and Kubernetes use)."""
        from cachetool.manifest import Manifest

        digest = media.sha(manifest_bytes)
        what = f"upload manifest {digest[:19]} to {self.url}"
        if self._head_blob(digest) is None:
            self._upload_retrying(digest, len(manifest_bytes), what, data=manifest_bytes)
        man = Manifest.from_bytes(manifest_bytes)
        uniq = {b.digest: b for b in blobs}
        planned = self._close_plan(frozenset(b.stored_digest for b in uniq.values()))
        if planned is not None:
            layers, singles = list(planned.layers), planned.singles
        else:  # no missing_blobs for this push (no packs planned): one layer per blob, as before packs
            layers, singles = [], sorted(uniq.values(), key=lambda b: b.digest)
        first_path: dict[str, str] = {}
        for f in sorted(man.files, key=lambda f: f.path):
            first_path.setdefault(f.digest, f.path)
        for b in singles:
            ann = {A + "content.digest": b.digest, A + "content.size": str(b.size)}
            if b.digest in first_path:
                ann[media.TITLE] = first_path[b.digest] + ".zst"
            layers.append({"mediaType": media.BLOB_MEDIA_TYPE, "digest": b.stored_digest, "size": b.stored_size,
                           "annotations": ann})
        layers.sort(key=lambda l: (l["mediaType"], l["digest"]))
        size = man.stored_size + len(manifest_bytes)
        body = media.compose_bundle_manifest(manifest_bytes, layers, man.platform, dict(man.fingerprint or {}), size)
        oci = media.sha(body)
        if self._tag_digest(oci) != oci:  # a re-push of the same bundle sends no manifest again
            self._put_manifest(oci, body, media.OCI_MANIFEST, what)
        self._remember(digest, oci, len(body), layers)
        if signature is not None:
            self._attach_signature(digest, signature)
        return StoredManifest(digest, oci)

    def _remember(self, manifest_digest: str, oci: str, size: int, layers: list) -> None:
        self._oci[manifest_digest] = (oci, size)
        idx = packs.PackIndex()
        idx.add_layers(layers)
        self._layouts[manifest_digest] = idx

    def get_manifest(self, manifest_digest: str) -> bytes:
        what = f"download manifest {manifest_digest[:19]} from {self.url}"
        try:
            data = self._get_blob_bytes(manifest_digest, what, limit=512 << 20)
        except NotFoundError as exc:
            raise NotFoundError(f"manifest {manifest_digest[:19]} is missing from store {self.url}", store=self.url,
                                key=manifest_digest, status=exc.status) from None
        layout = self._layouts.get(manifest_digest)
        if layout:  # a bundle with packs: which pack holds which blob comes from this manifest's blob list
            from cachetool.manifest import Manifest

            try:
                man = Manifest.from_bytes(data)
            except CachetoolError as exc:  # stored under the digest (checked), yet not a bundle manifest
                raise filled(exc, store=self.url, key=manifest_digest)
            self._members[manifest_digest] = {packs.member_name(b): b for b in man.blobs}
            for b in man.blobs:
                self._blob_bundle[b.stored_digest] = manifest_digest
        return data

    def _oci_of(self, manifest_digest: str) -> tuple[str, int]:
        if manifest_digest not in self._oci:
            raise StoreError(f"{self.url}: no OCI manifest known for bundle {manifest_digest[:19]} "
                             "(read it through a tag or an OCI digest pin)", store=self.url, key=manifest_digest)
        return self._oci[manifest_digest]

