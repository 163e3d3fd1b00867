"""Phase 1 of verify and install: the manifest's bytes checked against the signature and the pinned keys, then
parsed and validated; :func:`verify_bundle` also checks every blob, writing nothing but temporary files."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from cachetool.bundle.manifest import Manifest
from cachetool.bundle.source import BundleSource
from cachetool.install.blobs import expand_blob, expand_bytes, in_memory

log = logging.getLogger("cachetool.install")

INSECURE_WARNING = (
    "WARNING: --insecure-skip-verify: the bundle's signature is NOT checked. A compile cache is executable code; "
    "anyone who could write this bundle can run code on every server that loads it."
)


def verified_manifest(
    source: BundleSource,
    *,
    trust: Iterable | None = None,
    insecure_skip_verify: bool = False,
    warn: Callable[[str], None] | None = None,
    skip_hint: bool = True,
) -> tuple[bytes, Manifest, str | None]:
    """Phase 1 of verify and install: the manifest's bytes, checked against the signature and the pinned keys
    (unless ``insecure_skip_verify``, which warns), then parsed and validated. Returns (bytes, manifest, key id).
    ``skip_hint``: an unsigned bundle's message offers ``--insecure-skip-verify`` (install and pull have it; verify,
    whose whole point is the check, has not)."""
    from cachetool.errors import FIELDS, UnsignedError

    mbytes = source.manifest_bytes()
    key_id = None
    if insecure_skip_verify:
        (warn or log.warning)(INSECURE_WARNING)
    else:
        from cachetool.bundle.signing import verify_envelope
        from cachetool.bundle.trust import load_trusted_keys

        envelope = source.signature_bytes()
        try:
            key_id = verify_envelope(envelope, mbytes, load_trusted_keys(trust)).keyid
        except UnsignedError as exc:
            if not skip_hint or envelope is not None:
                raise
            raise UnsignedError(
                "bundle is not signed (sign it with `cachetool sign`, or pass --insecure-skip-verify "
                "to install it unverified)",
                **{n: getattr(exc, n) for n in FIELDS},
            ) from None
    return mbytes, source.parsed_manifest(), key_id


def verify_bundle(
    source: BundleSource,
    *,
    trust: Iterable | None = None,
    insecure_skip_verify: bool = False,
    warn: Callable[[str], None] | None = None,
) -> tuple[Manifest, str | None]:
    """Verify the signature (unless skipped) and every blob of ``source``, writing nothing but temp files.

    Returns (manifest, key id of the verifying key or None).
    """
    _, manifest, key_id = verified_manifest(
        source, trust=trust, insecure_skip_verify=insecure_skip_verify, warn=warn, skip_hint=False
    )
    with tempfile.TemporaryDirectory(prefix="cachetool-verify-") as tmp:
        for blob in manifest.blobs:
            zst = Path(tmp) / "blob.zst"
            if in_memory(blob):  # as the installer checks it
                expand_bytes(blob, source.read_blob(blob, Path(tmp)))
                continue
            source.fetch_blob(blob, zst)
            expand_blob(blob, zst, None)
            zst.unlink()
    return manifest, key_id
