"""The OCI documents a bundle is made of, composed deterministically, and how a read document is recognised.

A bundle (one platform) is one OCI image manifest; see docs/stores.md ("OCI layout") for the whole picture::

    artifactType  application/vnd.cachetool.bundle.v1+json
    config        our bundle manifest JSON (mediaType application/vnd.cachetool.manifest.v1+json): the config
                  digest *is* the bundle's manifest digest, and the signature is over exactly these bytes
    layers        a large blob: its own layer (application/vnd.cachetool.blob.v1+zstd, the zstd bytes);
                  small blobs: packs (application/vnd.cachetool.pack.v1.tar, see packs.py)
    annotations   dev.cachetool.manifest.digest / .platform / .fingerprint / .size

A bundle is recognised by this manifest alone (artifactType, or the config media type when a copy dropped the
artifactType), never by what wraps it: a tag may point at our index, at an index a mirror rewrote, or straight
at the manifest.
"""

from __future__ import annotations

import hashlib
import json

ARTIFACT_TYPE = "application/vnd.cachetool.bundle.v1+json"
SIGNATURE_ARTIFACT_TYPE = "application/vnd.cachetool.signature.v1+json"
CONFIG_MEDIA_TYPE = "application/vnd.cachetool.manifest.v1+json"
BLOB_MEDIA_TYPE = "application/vnd.cachetool.blob.v1+zstd"
PACK_MEDIA_TYPE = "application/vnd.cachetool.pack.v1.tar"
DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
ACCEPT = ", ".join((OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST))
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_JSON = b"{}"
A = "dev.cachetool."  # annotation prefix
TITLE = "org.opencontainers.image.title"
CREATED = "org.opencontainers.image.created"
ARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
}


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


EMPTY_DIGEST = sha(EMPTY_JSON)


def canonical(doc: dict) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def platform_of(fingerprint: dict) -> dict:
    fp = fingerprint or {}
    return {"os": fp.get("os") or "linux", "architecture": ARCH.get(fp.get("arch") or "", fp.get("arch") or "unknown")}


def compose_bundle_manifest(
    manifest_bytes: bytes, layers: list[dict], platform: str, fingerprint: dict, size: int
) -> bytes:
    """The OCI image manifest of one bundle. Deterministic: the same bundle always has the same OCI digest."""
    doc = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": sha(manifest_bytes), "size": len(manifest_bytes)},
        "layers": layers,
        "annotations": {
            A + "manifest.digest": sha(manifest_bytes),
            A + "platform": platform,
            A + "fingerprint": json.dumps(fingerprint or {}, sort_keys=True, separators=(",", ":")),
            A + "size": str(size),
        },
    }
    return canonical(doc)


def compose_signature(envelope: bytes, subject: dict, manifest_digest: str, created: str) -> bytes:
    """The signature artifact: an OCI 1.1 referrer of the bundle's manifest (``subject``) with the DSSE envelope
    as its one layer."""
    doc = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": SIGNATURE_ARTIFACT_TYPE,
        "config": {"mediaType": EMPTY_MEDIA_TYPE, "digest": EMPTY_DIGEST, "size": len(EMPTY_JSON)},
        "layers": [{"mediaType": DSSE_MEDIA_TYPE, "digest": sha(envelope), "size": len(envelope)}],
        "subject": subject,
        "annotations": {A + "manifest.digest": manifest_digest, CREATED: created},
    }
    return canonical(doc)


def compose_index(manifests: list[dict], annotations: dict | None = None, artifact_type: str | None = None) -> bytes:
    doc: dict = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}
    if artifact_type:
        doc["artifactType"] = artifact_type
    if annotations:
        doc["annotations"] = annotations
    return canonical(doc)


def is_index(doc: dict, media_type: str = "") -> bool:
    return doc.get("mediaType", media_type) in (OCI_INDEX, DOCKER_LIST) or ("manifests" in doc and "layers" not in doc)


def is_bundle_manifest(doc: dict) -> bool:
    """Our bundle manifest, recognised by itself: artifactType, or (a copy that dropped it) the config type."""
    if not isinstance(doc, dict) or is_index(doc):
        return False
    cfg = doc.get("config")
    return doc.get("artifactType") == ARTIFACT_TYPE or (
        isinstance(cfg, dict) and cfg.get("mediaType") == CONFIG_MEDIA_TYPE
    )


def is_signature_manifest(doc: dict) -> bool:
    return isinstance(doc, dict) and doc.get("artifactType") == SIGNATURE_ARTIFACT_TYPE


def referrers_tag(digest: str) -> str:
    """The referrers tag schema of the OCI distribution spec: ``sha256:<hex>`` → ``sha256-<hex>``."""
    alg, _, hexpart = digest.partition(":")
    return f"{alg}-{hexpart}"


def legacy_signature_tag(digest: str) -> str:
    """Where cachetool before referrers put the signature (read, never written)."""
    return referrers_tag(digest) + ".sig"
