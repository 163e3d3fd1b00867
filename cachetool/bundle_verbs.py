"""The verbs of bundle files and what they hold: pack, keygen, sign, inspect, verify, install, diff (re-exported by
:mod:`cachetool.api`, the CLI's only door)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from cachetool import engines
from cachetool.cache_root import CacheRoot
from cachetool.results import BundleInfo, KeyPair, PackResult, SignResult, Sizes, VerifyResult

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from cachetool.bundle.signing import PublicKey
    from cachetool.install import InstallResult
    from cachetool.install.key_check import KeyCheck
    from cachetool.layouts.factors import Difference

__all__ = ["SignKey", "Trust", "diff", "inspect", "install", "keygen", "pack", "sign", "verify"]

SignKey = Union[str, Path, "Ed25519PrivateKey"]  # a key file, or a loaded key
Trust = Iterable[Union[str, Path, "PublicKey"]]  # public key files or folders, or loaded keys; None: the pinned ones


def pack(
    path: str | Path, output: str | Path, *, sign_key: SignKey | None = None, layout: str = "auto", level: int = 3
) -> PackResult:
    """Pack a cache (root, hash folder or rank folder) into the single-file bundle ``output``, signed with
    ``sign_key`` (a path or a loaded key) when given."""
    from cachetool.bundle.ctb import write_ctb
    from cachetool.bundle.packing import pack as pack_tree
    from cachetool.bundle.signing import envelope_key_ids

    with pack_tree(path, layout=layout, sign_key=sign_key, level=level) as b:
        out = write_ctb(b, output)
        m = b.manifest
        sig = b.signature_bytes()
        return PackResult(
            output=str(out),
            manifest_digest=b.manifest_digest,
            platform=b.platform,
            layout=m.layout,
            ranks=list(m.ranks),
            files=len(m.files),
            unique_blobs=len(m.blobs),
            signed_by=envelope_key_ids(sig) if sig is not None else [],
            bytes=Sizes.of(m),
        )


def keygen(output: str | Path) -> KeyPair:
    """An Ed25519 key pair: ``output`` (private, mode 0600) and ``output.pub``."""
    from cachetool.bundle.signing import generate_keypair

    priv, pub, kid = generate_keypair(output)
    return KeyPair(str(priv), str(pub), kid)


def sign(bundle: str | Path, sign_key: str | Path, *, output: str | Path | None = None) -> SignResult:
    """Add (or replace) the signature of ``sign_key`` on a ``.ctb`` file (in place, or into ``output``)."""
    from cachetool.bundle.ctb import open_ctb, write_ctb
    from cachetool.bundle.signing import key_id, load_private_key, sign_manifest

    k = load_private_key(sign_key)
    with open_ctb(bundle) as b:
        env = sign_manifest(b.manifest_bytes(), k, existing_envelope=b.signature_bytes())
        signed = b.with_signature(env)
        try:
            for blob in signed.blobs:  # extracted first: writing in place replaces the file read from
                signed.blob_path(blob)
            out = write_ctb(signed, output or bundle)
        finally:
            signed.close()
        return SignResult(str(out), key_id(k.public_key()), b.manifest_digest)


def inspect(bundle: str, *, platform: str | None = None, store_options: dict[str, Any] | None = None) -> BundleInfo:
    """What a bundle file or a ref's bundle holds (its manifest and signature only; nothing is verified)."""
    from cachetool.bundle.signing import envelope_key_ids
    from cachetool.transfer.reading import open_bundle

    with open_bundle(bundle, platform=platform, store_options=store_options) as b:
        m, sig = b.manifest, b.signature_bytes()
        engine = engines.for_layout(m.layout)
        return BundleInfo(
            bundle=str(bundle),
            manifest_digest=b.manifest_digest,
            schema=m.schema,
            tool_version=m.tool_version,
            layout=m.layout,
            save_format=m.save_format,
            platform=b.platform,
            fingerprint=dict(m.fingerprint),
            signed_by=envelope_key_ids(sig) if sig else [],
            keys=[k.to_json() for k in m.keys],
            ranks=list(m.ranks),
            units=[u.path for u in m.units],
            files=len(m.files),
            unique_blobs=len(m.blobs),
            bytes=Sizes.of(m),
            file_list=[f.to_json() for f in m.files],
            key_lines={k.hash: engine.key_lines(k.factors) for k in m.keys if k.factors is not None},  # type: ignore[attr-defined]  # baseline (issue 46)
        )


def verify(
    bundle: str, *, trust: Trust | None = None, platform: str | None = None, store_options: dict[str, Any] | None = None
) -> VerifyResult:
    """Check the signature against the trusted keys and every blob against the manifest (a ref's blobs are
    downloaded to a temporary folder); nothing is installed."""
    from cachetool.install import verify_bundle
    from cachetool.transfer.reading import open_bundle

    with open_bundle(bundle, platform=platform, store_options=store_options) as b:
        m, kid = verify_bundle(b, trust=trust)
        return VerifyResult(str(bundle), b.manifest_digest, kid, len(m.blobs), len(m.files))


def install(
    bundle: str | Path,
    cache_root: str | Path | None = None,
    *,
    key_check: KeyCheck | None = None,
    expected_key: dict[str, Any] | None = None,
    timeout: float | None = None,
    **options: Any,
) -> InstallResult:
    """Verify, preflight and atomically install a ``.ctb`` file into ``cache_root`` (default:
    :func:`cachetool.api.default_cache_root`); ``key_check``: the server's key question (an engine's ``KeyCheck``), or
    ``expected_key``: a native key computed beforehand (:func:`cachetool.api.expected_cache_key`'s). ``options``: the install's,
    each with its default in :class:`cachetool.install.options.InstallOptions` (``trust``, ``insecure_skip_verify``,
    ``ranks``, ``preflight``, ``device``, ``force``, ``keep_changed``, ``warn``, ``workers``); ``timeout``: seconds
    for the whole install, applied as its bound (:mod:`cachetool.bounds`). Returns its
    :class:`~cachetool.install.InstallResult`."""
    from cachetool import bounds
    from cachetool.bundle.ctb import open_ctb
    from cachetool.install import InstallOptions, install_bundle

    settled = InstallOptions(**options)  # an option that is none is refused before the bundle is opened
    if expected_key is not None:
        key_check = engines.default().expected_key_check(expected_key)  # type: ignore[attr-defined]  # the pipeline's own
    with bounds.applied(bounds.Bound.timeout(timeout)), open_ctb(bundle) as b:
        return install_bundle(b, CacheRoot.of(cache_root, engines.default()), settled, key_check=key_check)  # type: ignore[arg-type]  # baseline (issue 46)


def diff(
    a: str,
    b: str,
    *,
    device: str | None = None,
    engine: str | None = None,
    model: str | None = None,
    flags: list[str] | tuple[str, ...] = (),
    platform: str | None = None,
    store_options: dict[str, Any] | None = None,
) -> list[Difference]:
    """Every hash factor that differs between A and B (bundle files, refs, cache folders or ``local``), as
    :class:`cachetool.layouts.factors.Difference` items. The engine (``engine``, else A's by its layout) reads and
    compares the keys; against ``local`` an engine whose server computes its key (vLLM) compares this machine's
    facts and, with ``model`` and the server's ``flags``, the key inputs its server computes."""
    from cachetool.diff import diff_sources

    return diff_sources(
        a,
        b,
        device=device,
        engine=engines.get(engine) if engine is not None else None,
        model=model,
        flags=list(flags),
        reading={"platform": platform, "store_options": store_options},
    )
