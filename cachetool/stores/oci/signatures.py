"""Signatures on OCI: an OCI 1.1 referrer of the bundle's manifest, listed by the referrers API or, on a
registry without one (docker-registry 2.8), in the referrers tag ``sha256-<hex>`` (the distribution spec's
fallback); read back from either, or from the ``sha256-<hex>.sig`` tag of older cachetool."""

from __future__ import annotations

import json

from cachetool.errors import NotFoundError, StoreError, VerificationError, cause
from cachetool.stores.common import now_iso
from cachetool.stores.oci import media
from cachetool.stores.oci.manifests import BundleManifests
from cachetool.stores.oci.media import CREATED, A
from cachetool.stores.oci.refs import Tags
from cachetool.stores.oci.repository import Repository
from cachetool.stores.oci.uploads import BlobTransfer


class Signatures:
    """The signatures of the bundles in ``repository``: a push's commit attaches one (``tags`` writes the referrers
    tag, converging), ``get_signature`` reads it; ``manifests`` names the OCI manifest each signs."""

    def __init__(self, repository: Repository, manifests: BundleManifests, tags: Tags, blobs: BlobTransfer):
        self.repository = repository
        self.manifests = manifests
        self.tags = tags
        self.blobs = blobs  # the store's uploads: two pushes through it send the shared empty config once
        self.url = repository.url

    def attach(self, manifest_digest: str, envelope: bytes) -> None:
        what = f"upload signature to {self.url}"
        oci, size = self.manifests.oci_of(manifest_digest)
        for data in (envelope, media.EMPTY_JSON):
            digest = media.sha(data)
            if not self.blobs.has(digest, len(data)):
                self.blobs.upload_once(digest, len(data), what, data=data)
        created = now_iso()
        body = media.compose_signature(
            envelope, {"mediaType": media.OCI_MANIFEST, "digest": oci, "size": size}, manifest_digest, created
        )
        sig = media.sha(body)
        r = self.repository.put_manifest(sig, body, media.OCI_MANIFEST, what)
        if r.headers.get("OCI-Subject"):
            return  # the registry keeps the referrers list itself
        desc = {
            "mediaType": media.OCI_MANIFEST,
            "digest": sig,
            "size": len(body),
            "artifactType": media.SIGNATURE_ARTIFACT_TYPE,
            "annotations": {A + "manifest.digest": manifest_digest, CREATED: created},
        }

        def add(old: list[dict]) -> list[dict]:
            # the newest envelope holds every signature (re-signing merges), so it replaces ours before it
            kept = [
                d for d in old or [] if d.get("artifactType") != media.SIGNATURE_ARTIFACT_TYPE or d.get("digest") == sig
            ]
            return kept if any(d.get("digest") == sig for d in kept) else kept + [desc]

        self.tags.converge(
            media.referrers_tag(oci),
            lambda: self.read_referrers_tag(oci),
            add,
            lambda descs: self._write_referrers_tag(oci, descs),
            f"attach signature to {oci[:19]}",
        )

    def read_referrers_tag(self, subject: str) -> tuple[list[dict] | None, str | None]:
        tag = media.referrers_tag(subject)
        try:
            body, _, digest = self.repository.get_manifest(tag, f"read referrers of {subject[:19]} in {self.url}")
        except NotFoundError:
            return None, None
        try:
            doc = json.loads(body)
            if media.is_index(doc):
                descs = [d for d in doc.get("manifests") or [] if isinstance(d, dict)]
            else:  # a copy without --all leaves the tag on the one referrer itself
                descs = [
                    {
                        "mediaType": media.OCI_MANIFEST,
                        "digest": digest,
                        "size": len(body),
                        "artifactType": doc.get("artifactType"),
                        "annotations": doc.get("annotations") or {},
                    }
                ]
        except (ValueError, AttributeError, RecursionError):
            raise StoreError(f"{self.url}:{tag} is not a referrers index", store=self.url, key=tag) from None
        return descs, digest

    def _write_referrers_tag(self, subject: str, descs: list[dict]) -> None:
        tag = media.referrers_tag(subject)
        self.repository.put_manifest(tag, media.compose_index(descs), media.OCI_INDEX, f"write {self.url}:{tag}")

    def _referrers(self, subject: str) -> list[dict]:
        """Descriptors of the referrers of ``subject``: the referrers API, else the referrers tag."""
        what = f"list referrers of {subject[:19]} in {self.url}"
        r = self.repository.request(
            "GET",
            self.repository.v2(f"referrers/{subject}"),
            what,
            ok=(200, 400, 404, 405),
            headers={"Accept": media.OCI_INDEX},
            stream=True,
        )
        if r.status_code == 200 and r.headers.get("Content-Type", "").startswith(media.OCI_INDEX):
            try:
                return [
                    d
                    for d in json.loads(self.repository.client.read_body(r, 4 << 20, what)).get("manifests") or []
                    if isinstance(d, dict)
                ]
            except (ValueError, AttributeError, RecursionError):
                raise StoreError(
                    f"{what}: the registry's answer is not an index", store=self.url, key=subject, status=r.status_code
                ) from None
        r.close()
        return self.read_referrers_tag(subject)[0] or []

    def get_signature(self, manifest_digest: str) -> bytes | None:
        what = f"download signature of {manifest_digest[:19]} from {self.url}"
        oci, _ = self.manifests.oci_of(manifest_digest)
        # a copy may drop the descriptors' artifactType: then the manifest itself says what it is
        sigs = [d for d in self._referrers(oci) if d.get("artifactType") in (None, media.SIGNATURE_ARTIFACT_TYPE)]
        sigs.sort(key=lambda d: str((d.get("annotations") or {}).get(CREATED, "")))
        for d in reversed(sigs):
            try:
                body, _, _ = self.repository.get_manifest(str(d.get("digest")), what, media.OCI_MANIFEST)
            except NotFoundError:
                continue  # listed but gone (a registry GC): try the next one
            try:
                if not media.is_signature_manifest(json.loads(body)):
                    continue
            except (ValueError, RecursionError):
                continue
            return self._envelope_of(body, oci, what)
        try:  # cachetool before referrers: the signature manifest under sha256-<hex>.sig
            body, _, _ = self.repository.get_manifest(media.legacy_signature_tag(oci), what, media.OCI_MANIFEST)
        except NotFoundError:
            return None
        return self._envelope_of(body, oci, what)

    def _envelope_of(self, body: bytes, subject: str, what: str) -> bytes:
        try:
            doc = json.loads(body)
            layer = doc["layers"][0]
            if layer.get("mediaType") != media.DSSE_MEDIA_TYPE:
                raise ValueError(layer.get("mediaType"))
            if (doc.get("subject") or {}).get("digest") != subject:
                raise ValueError("subject")
            digest = layer["digest"]
        except (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError) as exc:
            raise VerificationError(
                f"{what}: malformed signature artifact ({cause(exc, detail=True)})", store=self.url, key=subject
            ) from None
        # The envelope holds the manifest (base64, up to 64 MiB here) and every signature.
        return self.repository.get_blob_bytes(digest, what, limit=128 << 20)
