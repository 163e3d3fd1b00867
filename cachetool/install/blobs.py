"""Blob decoding: a fetched blob's stored (zstd) bytes checked (size, sha256, frame header), then expanded with the
output bounded by the declared size (a decompression bomb stops there) and the content's sha256 checked."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from cachetool import bounds
from cachetool.digests import sha256_stream
from cachetool.errors import BlobVerificationError
from cachetool.install.fs import CHUNK
from cachetool.stores.base import BlobRef


def _refused(blob: BlobRef, why: str) -> BlobVerificationError:
    """The refusal of ``blob`` (named by its content digest, also its ``key``): ``why`` follows its short name."""
    return BlobVerificationError(f"blob {blob.digest[:19]}{why}", key=blob.digest)


def check_stored(blob: BlobRef, zst: Path) -> None:
    import zstandard

    st = zst.stat()
    if st.st_size != blob.stored_size:
        raise _refused(blob, f" is {st.st_size} bytes stored, manifest says {blob.stored_size} (truncated or size lie)")
    with open(zst, "rb") as f:
        head = f.read(18)
        f.seek(0)
        digest, _n = sha256_stream(f)
    if digest != blob.stored_digest:
        raise _refused(blob, ": stored bytes do not match their digest (tampered)")
    try:
        params = zstandard.get_frame_parameters(head)
    except zstandard.ZstdError:
        raise _refused(blob, " is not a zstd frame") from None
    if params.content_size != zstandard.CONTENTSIZE_UNKNOWN and params.content_size != blob.size:
        raise _refused(blob, f" declares {params.content_size} bytes in its zstd frame, manifest says {blob.size} "
                             "(size lie)")


def expand_blob(blob: BlobRef, zst: Path, out) -> None:
    """Verify the stored bytes at ``zst`` and write the content to ``out`` (a binary file or None).

    Decompression never produces more than ``blob.size + 1`` bytes (bombs stop there); the content's sha256
    and size must match the manifest.
    """
    import zstandard

    check_stored(blob, zst)
    dctx = zstandard.ZstdDecompressor(max_window_size=1 << 27)
    h = hashlib.sha256()
    n = 0
    with open(zst, "rb") as f:
        try:
            reader = dctx.stream_reader(f, read_across_frames=True)
            while True:
                bounds.check(f"expand blob {blob.digest[:19]}", key=blob.digest)  # pull --timeout, a stop signal
                chunk = reader.read(min(CHUNK, blob.size - n + 1))
                if not chunk:
                    break
                n += len(chunk)
                if n > blob.size:
                    raise _refused(blob, f" decompresses beyond its declared {blob.size} bytes "
                                         "(decompression bomb or size lie)")
                h.update(chunk)
                if out is not None:
                    out.write(chunk)
        except zstandard.ZstdError as exc:
            raise _refused(blob, f" is corrupt zstd ({exc})") from None
    if n != blob.size:
        raise _refused(blob, f" decompresses to {n} bytes, manifest says {blob.size}")
    if "sha256:" + h.hexdigest() != blob.digest:
        raise _refused(blob, ": content does not match its digest (tampered)")


def verify_and_expand(blob: BlobRef, zst: Path, dest: Path, mode: int) -> None:
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    with os.fdopen(fd, "wb") as out:
        expand_blob(blob, zst, out)
        os.fchmod(out.fileno(), mode)
