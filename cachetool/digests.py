"""Content addresses: sha256 digests and blob refs, below the manifest and the stores (both use them).

A digest is written ``sha256:<64 lowercase hex>`` everywhere (manifest, refs, store keys); :func:`hexof` is the
one check before a digest becomes a file or key name.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from cachetool.errors import VerificationError

CHUNK = 1 << 20  # read size of every hashing and copying loop
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclasses.dataclass(frozen=True)
class BlobRef:
    """A blob: ``digest``/``size`` of the uncompressed content, ``stored_*`` of the zstd bytes in the store."""

    digest: str  # "sha256:<hex>" of the uncompressed content
    size: int
    stored_digest: str  # "sha256:<hex>" of the zstd-compressed bytes
    stored_size: int


def read_fetched(blob: BlobRef, fetch: Callable[[Path], None], scratch_dir: Path) -> bytes:
    """What ``fetch(path)`` writes to a file in ``scratch_dir`` named by ``blob``'s stored digest, read back into
    memory (at most ``blob.stored_size + 1`` bytes: one past the declared size is enough to refuse it); the file is
    removed again."""
    path = scratch_dir / blob.stored_digest.split(":", 1)[1]
    try:
        fetch(path)
        with open(path, "rb") as f:
            return f.read(blob.stored_size + 1)
    finally:
        path.unlink(missing_ok=True)


def is_digest(value: object) -> bool:
    """True for a string ``sha256:<64 lowercase hex>``."""
    return isinstance(value, str) and bool(DIGEST_RE.match(value))


def hexof(digest: str) -> str:
    """``sha256:<hex>`` → ``<hex>``, refusing anything else (a digest becomes a file or key name)."""
    if not is_digest(digest):
        raise VerificationError(f"not a sha256 digest: {digest!r}")
    return digest[7:]


def sha256_bytes(data: bytes) -> str:
    """``sha256:<hex>`` of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def sha256_stream(f: BinaryIO) -> tuple[str, int]:
    """``(sha256:<hex>, bytes read)`` of a binary file object read from where it stands to its end."""
    h = hashlib.sha256()
    n = 0
    for chunk in iter(lambda: f.read(CHUNK), b""):
        h.update(chunk)
        n += len(chunk)
    return "sha256:" + h.hexdigest(), n


def sha256_file(path: str | Path) -> tuple[str, int]:
    """``(sha256:<hex>, size read)`` of the file at ``path``."""
    with open(path, "rb") as f:
        return sha256_stream(f)
