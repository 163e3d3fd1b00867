"""One push to an OCI registry (a :class:`cachetool.stores.base.PushSession`): its plan of packs, the uploads that
plan asks for, and at commit the OCI manifest that lists exactly those layers, then the signature as a referrer.

The plan is the session's own, so pushes through one store object (a server pushing from threads, or two pushes of
one bundle) never take each other's packs; its pack files live in the session's own folder, removed at commit or
abort."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from cachetool.digests import BlobRef, hexof, sha256_file
from cachetool.stores.base import PushSession, StoredManifest
from cachetool.stores.oci import media, packs
from cachetool.stores.oci.manifests import BundleManifests
from cachetool.stores.oci.media import A
from cachetool.stores.oci.repository import Repository
from cachetool.stores.oci.signatures import Signatures
from cachetool.stores.oci.uploads import BlobTransfer


@dataclass(frozen=True)
class PushPlan:
    """One push's packing: the pack layers its manifest lists, the blobs it sends alone, and the pack of each packed
    blob (content digest -> (pack digest, size, file))."""

    layers: list[dict]
    singles: list[BlobRef]
    pack_of: dict[str, tuple[str, int, Path]]

    @classmethod
    def unpacked(cls, blobs: list[BlobRef]) -> PushPlan:
        """Every blob a layer of its own (a push that never asked what is missing planned no packs)."""
        return cls([], sorted(blobs, key=lambda b: b.digest), {})

    @classmethod
    def write(cls, blobs: list[BlobRef], blob_path: Callable[[BlobRef], Path], folder: Path) -> PushPlan:
        """Group the small blobs into packs (:func:`.packs.plan`) and write each into ``folder``."""
        plan = packs.plan(list(blobs))
        layers, pack_of = [], {}
        for members in plan.packs:
            fd, name = tempfile.mkstemp(prefix="pack-", suffix=".tar", dir=folder)
            with os.fdopen(fd, "wb") as f:
                packs.write_pack(members, blob_path, f)
            digest, size = sha256_file(name)
            final = folder / (hexof(digest) + ".tar")
            Path(name).replace(final)
            for b in members:
                pack_of[b.digest] = (digest, size, final)
            layers.append(
                {
                    "mediaType": media.PACK_MEDIA_TYPE,
                    "digest": digest,
                    "size": size,
                    "annotations": {
                        A + "pack.first": members[0].digest,
                        A + "pack.count": str(len(members)),
                        media.TITLE: f"pack-{hexof(members[0].digest)[:16]}.tar",
                    },
                }
            )
        return cls(layers, plan.singles, pack_of)


class OCIPush(PushSession):
    """A push session on :class:`cachetool.stores.oci.store.OCIStore`, built from its parts."""

    def __init__(
        self,
        blobs: list[BlobRef],
        blob_path: Callable[[BlobRef], Path],
        *,
        repository: Repository,
        transfer: BlobTransfer,
        manifests: BundleManifests,
        signatures: Signatures,
    ):
        super().__init__(repository.url, blobs, blob_path)
        self.repository = repository
        self.transfer = transfer
        self.manifests = manifests
        self.signatures = signatures
        self.plan: PushPlan | None = None  # made by missing()
        self._folder: Path | None = None

    def _missing(self, workers: int) -> list[BlobRef]:
        """Plan the packs first (files in this session's folder): a small blob is missing when its pack is, and
        uploading it uploads its pack. Then one HEAD per pack or single blob, ``workers`` at a time."""
        self._folder = Path(tempfile.mkdtemp(prefix="push-", dir=self.transfer.scratch()))
        self.plan = PushPlan.write(self.blobs, self.blob_path, self._folder)
        with ThreadPoolExecutor(max(1, workers)) as ex:
            present = list(ex.map(self._present, self.blobs))
        return [b for b, there in zip(self.blobs, present) if not there]

    def _present(self, blob: BlobRef) -> bool:
        if self.plan is not None and blob.digest in self.plan.pack_of:
            digest, size, _ = self.plan.pack_of[blob.digest]
            return self.transfer.has(digest, size)
        return self.transfer.has(blob.stored_digest, blob.stored_size)

    def _put_blob(self, blob: BlobRef) -> None:
        """Upload the pack this push keeps ``blob`` in (once), or the blob itself where it travels alone."""
        url = self.store_url
        if self.plan is not None and blob.digest in self.plan.pack_of:
            digest, size, path = self.plan.pack_of[blob.digest]
            self.transfer.upload_once(digest, size, f"upload pack {digest[:19]} to {url}", path=path)
        else:
            what = f"upload blob {blob.stored_digest[:19]} to {url}"
            self.transfer.upload_once(blob.stored_digest, blob.stored_size, what, path=Path(self.blob_path(blob)))

    def _commit(self, manifest_bytes: bytes, signature: bytes | None) -> StoredManifest:
        """The bundle manifest as a blob (the config), the OCI manifest listing this push's layers, then the
        signature as a referrer of it. The pin is the OCI manifest's digest (what docker, skopeo and Kubernetes
        use)."""
        from cachetool.bundle.manifest import Manifest

        repo = self.repository
        digest = media.sha(manifest_bytes)
        what = f"upload manifest {digest[:19]} to {self.store_url}"
        if repo.head_blob(digest) is None:
            repo.upload_retrying(digest, len(manifest_bytes), what, data=manifest_bytes)
        man = Manifest.from_bytes(manifest_bytes)
        plan = self.plan or PushPlan.unpacked(self.blobs)
        layers = list(plan.layers)
        first_path: dict[str, str] = {}
        for f in sorted(man.files, key=lambda f: f.path):
            first_path.setdefault(f.digest, f.path)
        for b in plan.singles:
            ann = {A + "content.digest": b.digest, A + "content.size": str(b.size)}
            if b.digest in first_path:
                ann[media.TITLE] = first_path[b.digest] + ".zst"
            layers.append(
                {
                    "mediaType": media.BLOB_MEDIA_TYPE,
                    "digest": b.stored_digest,
                    "size": b.stored_size,
                    "annotations": ann,
                }
            )
        layers.sort(key=lambda l: (l["mediaType"], l["digest"]))
        size = man.stored_size + len(manifest_bytes)
        body = media.compose_bundle_manifest(manifest_bytes, layers, man.platform, dict(man.fingerprint or {}), size)
        oci = media.sha(body)
        if repo.tag_digest(oci) != oci:  # a re-push of the same bundle sends no manifest again
            repo.put_manifest(oci, body, media.OCI_MANIFEST, what)
        self.manifests.remember(digest, oci, len(body), layers)
        if signature is not None:
            self.signatures.attach(digest, signature)
        return StoredManifest(digest, oci)

    def _discard(self) -> None:
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None
