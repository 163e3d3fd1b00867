"""Blob decoding: a fetched blob's stored (zstd) bytes checked (size, sha256, frame header), then expanded with the
output bounded by the declared size (a decompression bomb stops there) and the content's sha256 checked.

A small blob (:func:`in_memory`: the Triton and Inductor caches hold 100,000 of them) is checked and expanded in
memory (:func:`expand_bytes`), a larger one from its fetched file (:func:`expand_blob`): the same checks, in the
same order. Each thread keeps one zstd decompressor for all the blobs it expands."""

from __future__ import annotations

import hashlib
import io
import os
import threading
from pathlib import Path

from cachetool import bounds
from cachetool.digests import sha256_bytes, sha256_stream
from cachetool.errors import BlobVerificationError
from cachetool.install.fs import CHUNK
from cachetool.stores.base import BlobRef

IN_MEMORY_MAX = 1 << 20  # a blob of at most this many bytes, stored and expanded, is read and expanded in memory
_MAX_WINDOW = 1 << 27
_local = threading.local()


def in_memory(blob: BlobRef) -> bool:
    return blob.size <= IN_MEMORY_MAX and blob.stored_size <= IN_MEMORY_MAX


def _refused(blob: BlobRef, why: str) -> BlobVerificationError:
    """The refusal of ``blob`` (named by its content digest, also its ``key``): ``why`` follows its short name."""
    return BlobVerificationError(f"blob {blob.digest[:19]}{why}", key=blob.digest)


def _size_refused(blob: BlobRef, size: int) -> BlobVerificationError:
    return _refused(blob, f" is {size} bytes stored, manifest says {blob.stored_size} (truncated or size lie)")


def _check_stored_facts(blob: BlobRef, size: int, digest: str, head: bytes) -> None:
    """The stored bytes' size, digest and zstd frame header (``head``: their first 18 bytes) against the manifest."""
    import zstandard

    if size != blob.stored_size:
        raise _size_refused(blob, size)
    if digest != blob.stored_digest:
        raise _refused(blob, ": stored bytes do not match their digest (tampered)")
    try:
        params = zstandard.get_frame_parameters(head)
    except zstandard.ZstdError:
        raise _refused(blob, " is not a zstd frame") from None
    if params.content_size != zstandard.CONTENTSIZE_UNKNOWN and params.content_size != blob.size:
        raise _refused(
            blob, f" declares {params.content_size} bytes in its zstd frame, manifest says {blob.size} (size lie)"
        )


def check_stored(blob: BlobRef, zst: Path) -> None:
    st = zst.stat()
    if st.st_size != blob.stored_size:  # before reading a file of any size
        raise _size_refused(blob, st.st_size)
    with open(zst, "rb") as f:
        head = f.read(18)
        f.seek(0)
        digest, _n = sha256_stream(f)
    _check_stored_facts(blob, st.st_size, digest, head)


def _decompressor():
    """This thread's zstd decompressor (each operation on it starts afresh; a thread runs one at a time)."""
    dctx = getattr(_local, "dctx", None)
    if dctx is None:
        import zstandard

        dctx = _local.dctx = zstandard.ZstdDecompressor(max_window_size=_MAX_WINDOW)
    return dctx


def _expand(blob: BlobRef, stored, out) -> None:
    """Decompress ``stored`` (a binary file or bytes, already checked) into ``out`` (a binary file or None), never
    past ``blob.size + 1`` bytes, and check the content's size and sha256."""
    import zstandard

    h = hashlib.sha256()
    n = 0
    try:
        reader = _decompressor().stream_reader(stored, read_across_frames=True)
        while True:
            bounds.check(f"expand blob {blob.digest[:19]}", key=blob.digest)  # pull --timeout, a stop signal
            chunk = reader.read(min(CHUNK, blob.size - n + 1))
            if not chunk:
                break
            n += len(chunk)
            if n > blob.size:
                raise _refused(
                    blob, f" decompresses beyond its declared {blob.size} bytes (decompression bomb or size lie)"
                )
            h.update(chunk)
            if out is not None:
                out.write(chunk)
    except zstandard.ZstdError as exc:
        raise _refused(blob, f" is corrupt zstd ({exc})") from None
    if n != blob.size:
        raise _refused(blob, f" decompresses to {n} bytes, manifest says {blob.size}")
    if "sha256:" + h.hexdigest() != blob.digest:
        raise _refused(blob, ": content does not match its digest (tampered)")


def expand_blob(blob: BlobRef, zst: Path, out) -> None:
    """Verify the stored bytes at ``zst`` and write the content to ``out`` (a binary file or None).

    Decompression never produces more than ``blob.size + 1`` bytes (bombs stop there); the content's sha256
    and size must match the manifest.
    """
    check_stored(blob, zst)
    with open(zst, "rb") as f:
        _expand(blob, f, out)


def expand_bytes(blob: BlobRef, stored: bytes) -> bytes:
    """:func:`expand_blob` of stored bytes held in memory (a small blob): the verified content."""
    _check_stored_facts(blob, len(stored), sha256_bytes(stored), stored[:18])
    out = io.BytesIO()
    _expand(blob, stored, out)
    return out.getvalue()


def verify_and_expand(blob: BlobRef, zst: Path, dest: Path, mode: int) -> None:
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    with os.fdopen(fd, "wb") as out:
        expand_blob(blob, zst, out)
        os.fchmod(out.fileno(), mode)
