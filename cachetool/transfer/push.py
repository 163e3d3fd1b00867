"""Push: a bundle (or a cache folder, packed on the way) into a store, through one push session
(``with store.push(...) as session``). Blobs go first, only those the store lacks (``session.missing()``, asked once:
a re-push of unchanged content uploads nothing), each checked against the manifest before the first write; then the
manifest with its signature (``session.commit``), and the ref last,
merging this bundle's platform into the tag's index (one tag holds bundles for several platforms; an entry of the
same platform is replaced)."""

from __future__ import annotations

import dataclasses
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cachetool.digests import sha256_file
from cachetool.errors import CachetoolError, StoreError, UsageError, VerificationError, filled
from cachetool.refs.opening import open_ref
from cachetool.stores.addresses import Ref, parse_ref
from cachetool.stores.base import BlobRef, RefEntry, RefIndex, Store
from cachetool.stores.common import now_iso
from cachetool.transfer.progress import TransferProgress, progress_default


@dataclasses.dataclass
class PushResult:
    ref: str
    manifest_digest: str
    platform: str
    signed: bool  # a signature went with the push, or the store already held one for this manifest
    blobs_total: int
    blobs_uploaded: int
    blobs_skipped: int  # already in the store
    bytes_uploaded: int  # stored (zstd) bytes of uploaded blobs + manifest + signature + ref
    bytes_skipped: int  # stored bytes of skipped blobs
    platforms: list[str]  # every platform under the tag after this push
    seconds: float
    pinned: str = ""  # the ref pinned to this bundle's digest (ref@sha256:...)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def _load_bundle(source, sign_key, layout: str):
    """A PackedBundle from a PackedBundle, a ``.ctb`` path or a cache folder; signed with ``sign_key`` if given."""
    from cachetool.bundle.ctb import open_ctb
    from cachetool.bundle.packing import PackedBundle, pack

    owned = False
    if isinstance(source, PackedBundle):
        bundle = source
    else:
        p = Path(source)
        if p.is_file():
            bundle, owned = open_ctb(p), True
        elif p.is_dir():
            return pack(p, layout=layout, sign_key=sign_key), True
        else:
            raise UsageError(f"{p} is neither a bundle file nor a cache folder")
    if sign_key is not None:
        from cachetool.bundle.signing import load_private_key, sign_manifest

        key = load_private_key(sign_key) if isinstance(sign_key, (str, os.PathLike)) else sign_key
        bundle = bundle.with_signature(sign_manifest(bundle.manifest_bytes(), key, bundle.signature_bytes()))
    return bundle, owned


def _check_stored_bytes(bundle, blob: BlobRef, fields: dict) -> None:
    digest, n = sha256_file(bundle.blob_path(blob))
    if n != blob.stored_size or digest != blob.stored_digest:
        raise VerificationError(
            f"{bundle.description}: blob {blob.digest[:19]} does not match the manifest "
            "(tampered or truncated); nothing pushed",
            key=blob.stored_digest,
            **fields,
        )


def _check_envelope(bundle, fields: dict) -> None:
    import base64

    from cachetool.bundle.signing import parse_envelope

    sig = bundle.signature_bytes()
    if sig is None:
        return
    env = parse_envelope(sig)
    try:
        payload = base64.b64decode(env["payload"], validate=True)
    except ValueError:
        payload = None
    if payload != bundle.manifest_bytes():
        raise VerificationError(
            f"{bundle.description}: the signature is for a different manifest; nothing pushed",
            key=bundle.manifest_digest,
            **fields,
        )


def merge_index(old: RefIndex | None, name: str, tag: str, entry: RefEntry) -> RefIndex:
    """The tag's index with ``entry`` added, replacing an entry of the same platform."""
    kept = [e for e in (old.entries if old else ()) if e.platform != entry.platform]
    return RefIndex(name, tag, tuple(sorted([*kept, entry], key=lambda e: e.platform)))


def _store_signs(st: Store, digest: str) -> bool:
    """Whether ``st`` holds a signature for manifest ``digest`` (a store that cannot say now: no, and the push still
    warns)."""
    try:
        return st.get_signature(digest) is not None
    except CachetoolError:
        return False


def push(
    source,
    ref: str | Ref,
    *,
    sign_key=None,
    layout: str = "auto",
    store: Store | None = None,
    store_options: dict | None = None,
    workers: int = 8,
    progress: bool | None = None,
) -> PushResult:
    """Push ``source`` (a PackedBundle, a ``.ctb`` path or a cache folder, packed on the way) to ``ref``, in named
    phases: the bundle (:func:`_load_bundle`), the blobs the store lacks, checked before the first write
    (:func:`_missing_checked`), their upload (:func:`_upload`), the manifest and its signature
    (:func:`_commit_manifest`), the tag's index (:func:`_write_ref`).

    ``sign_key``: a private key (path or object) to sign with (a cache folder is signed while packing; a bundle
    gets the signature added). ``store_options``: ``endpoint_url``, ``profile``, ``region``, ``insecure``.
    """
    t0 = time.monotonic()
    _refuse_pin(ref)
    r, st, own_store = open_ref(ref, store, store_options)
    bundle, own_bundle = _load_bundle(source, sign_key, layout)
    fields = {"store": st.url, "ref": r.url}  # of every failure of this push
    workers = max(1, workers)
    try:
        with st.push(bundle.blobs, bundle.blob_path) as session:
            blobs = session.blobs  # unique by stored digest
            missing = _missing_checked(session, bundle, fields, workers)
            up0 = st.counters.bytes_up
            _upload(
                session, missing, f"push {r.name}:{r.tag} ({len(missing)} of {len(blobs)} blobs)", workers, progress
            )
            stored = _commit_manifest(session, st, bundle, fields)
        # an unsigned copy of a manifest the store already holds a signature for (an earlier signed push) is signed
        # for every reader of the ref: say so, rather than warn that pull refuses it
        signed = bundle.signature_bytes() is not None or _store_signs(st, stored.digest)
        entry, index = _write_ref(st, r, bundle, stored.digest)
        return _result(
            r,
            stored,
            entry,
            index,
            blobs,
            missing,
            signed,
            bytes_up=st.counters.bytes_up - up0,
            seconds=time.monotonic() - t0,
        )
    except CachetoolError as exc:  # a store's failure below that did not know the ref (a blob upload) names it
        filled(exc, **fields)
        raise
    finally:
        if own_bundle:
            bundle.close()
        if own_store:
            st.close()


def _result(
    r, stored, entry, index, blobs: list, missing: list, signed: bool, *, bytes_up: int, seconds: float
) -> PushResult:
    """What the push did: the blobs it uploaded and those the store had, where the tag's index now points."""
    lacking = {b.stored_digest for b in missing}
    skipped = [b for b in blobs if b.stored_digest not in lacking]
    return PushResult(
        ref=r.url,
        manifest_digest=stored.digest,
        platform=entry.platform,
        signed=signed,
        blobs_total=len(blobs),
        blobs_uploaded=len(missing),
        blobs_skipped=len(skipped),
        bytes_uploaded=bytes_up,
        bytes_skipped=sum(b.stored_size for b in skipped),
        platforms=[e.platform for e in index.entries],
        seconds=seconds,
        pinned=r.pinned(stored.pin).url,
    )


def _refuse_pin(ref: str | Ref) -> None:
    """A push writes a tag: a digest pin is refused before the store is opened."""
    if ref.digest if isinstance(ref, Ref) else parse_ref(ref).digest:
        raise UsageError(
            f"{ref}: push writes a tag; a digest pin (@sha256:...) can only be pulled",
            ref=ref.url if isinstance(ref, Ref) else ref,
        )


def _missing_checked(session, bundle, fields: dict, workers: int) -> list[BlobRef]:
    """The blobs the store lacks (asked once: a re-push of unchanged content uploads nothing), each checked against
    the manifest. A store is content-addressed and skips what it has: bytes written under a digest they don't match
    would poison it for every later push and pull, so everything is checked before the first write, the signature
    envelope too."""
    missing = session.missing(workers=workers)
    with ThreadPoolExecutor(workers) as ex:
        list(ex.map(lambda b: _check_stored_bytes(bundle, b, fields), missing))
    _check_envelope(bundle, fields)
    return missing


def _upload(session, missing: list[BlobRef], title: str, workers: int, progress: bool | None) -> None:
    """The missing blobs uploaded on ``workers`` threads, the largest first, behind one progress bar."""
    with TransferProgress(progress_default(progress)) as prog:
        task = prog.task(title, sum(b.stored_size for b in missing))

        def up(b: BlobRef) -> None:
            session.put_blob(b)
            prog.advance(task, b.stored_size)

        with ThreadPoolExecutor(workers) as ex:
            for _ in ex.map(up, sorted(missing, key=lambda b: -b.stored_size)):
                pass


def _commit_manifest(session, st: Store, bundle, fields: dict):
    """The manifest and its signature committed; the store's answer (digest, pin), refused where the store stored
    the manifest under another digest (the ref is then not written: no reader is sent to the wrong manifest)."""
    stored = session.commit(bundle.manifest_bytes(), bundle.signature_bytes())
    if stored.digest != bundle.manifest_digest:
        raise StoreError(
            f"{st.url} stored the manifest as {stored.digest}, expected {bundle.manifest_digest}",
            key=stored.digest,
            **fields,
        )
    return stored


def _write_ref(st: Store, r: Ref, bundle, digest: str) -> tuple[RefEntry, RefIndex]:
    """The tag's index with this bundle's platform merged in (:func:`merge_index`), last: (its entry, the index)."""
    entry = RefEntry(
        manifest_digest=digest,
        platform=bundle.platform,
        fingerprint=dict(bundle.manifest.fingerprint or {}),
        size=bundle.stored_size,
        created=now_iso(),
    )
    index = st.update_ref(r.name, r.tag, lambda old: merge_index(old, r.name, r.tag, entry))
    return entry, index  # type: ignore[return-value]  # baseline (issue 46)
