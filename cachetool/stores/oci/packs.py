"""Packs: many small blobs in one OCI layer, so that a bundle of any size fits a registry's manifest limit.

One layer per cache file meets docker-registry's 4 MiB manifest limit at ~13,600 files. So:

- a bundle of at most :data:`PACK_FROM` distinct blobs has one layer per blob (the finest re-use between
  pushes, and what a generic client names best); past that:
- a blob of at least :data:`SMALL` stored bytes is its own layer (a changed artifact re-uploads its own size);
- smaller blobs are sorted by their content digest and cut into runs; a run ends after a blob whose digest
  ends in a chosen pattern (on average one in :func:`members_per_pack`), or at :data:`MAX_PACK` bytes. Because
  the boundaries come from the blobs themselves, adding or changing a file changes only the pack it falls in:
  the other packs keep their digest and a re-push skips them;
- a pack is a plain POSIX (ustar) tar, members ``<hex of the content sha256>.zst`` holding the blob's stored
  (zstd) bytes, in digest order, with fixed owner, mode and mtime: the same blobs always give the same bytes.

The bundle manifest (the config blob) maps every path to its content digest, so a generic client rebuilds the
tree from it: ``tar -xf`` each pack, then ``zstd -d <hex>.zst`` for each file. The layer's annotations
``dev.cachetool.pack.first`` (the first member's content digest) and ``.count`` let a reader find the pack of a
blob without downloading the others.
"""

from __future__ import annotations

import bisect
import dataclasses
import io
import tarfile
from collections.abc import Callable
from pathlib import Path

from cachetool.errors import VerificationError, cause
from cachetool.stores.base import BlobRef

PACK_FROM = 1000  # distinct blobs above which small ones are packed (the manifest limit is ~13,600 layers)
SMALL = 256 << 10  # stored bytes below which a blob travels in a pack
MAX_PACK = 4 << 20  # a run is cut here even without a content boundary
MEMBERS = 32  # mean members per pack for bundles that fit the manifest budget
LAYER_BUDGET = 8000  # layers a manifest may have and stay far below 4 MiB (~400 bytes each)


def member_name(blob: BlobRef) -> str:
    return blob.digest.split(":", 1)[1] + ".zst"


def members_per_pack(n_small: int) -> int:
    """Doubles while the packs would be too many for one manifest (1,000,000 files: 256 per pack)."""
    m = MEMBERS
    while n_small // m > LAYER_BUDGET:
        m *= 2
    return m


def _ends_run(blob: BlobRef, members: int) -> bool:
    return int(blob.digest[-8:], 16) % members == members - 1


@dataclasses.dataclass
class Plan:
    singles: list[BlobRef]  # own layers
    packs: list[list[BlobRef]]  # each sorted by content digest


def plan(blobs: list[BlobRef]) -> Plan:
    uniq = {b.digest: b for b in blobs}
    if len(uniq) <= PACK_FROM:
        return Plan(sorted(uniq.values(), key=lambda b: b.digest), [])
    small = sorted((b for b in uniq.values() if b.stored_size < SMALL), key=lambda b: b.digest)
    singles = sorted((b for b in uniq.values() if b.stored_size >= SMALL), key=lambda b: b.digest)
    members = members_per_pack(len(small))
    packs: list[list[BlobRef]] = []
    run: list[BlobRef] = []
    size = 0
    for b in small:
        run.append(b)
        size += b.stored_size + 1024  # a tar header and padding
        if _ends_run(b, members) or size >= MAX_PACK:
            packs.append(run)
            run, size = [], 0
    if run:
        packs.append(run)
    # a run of one is just a layer: no tar around it
    singles += [p[0] for p in packs if len(p) == 1]
    return Plan(sorted(singles, key=lambda b: b.digest), [p for p in packs if len(p) > 1])


def write_pack(members: list[BlobRef], blob_path: Callable[[BlobRef], Path], out) -> None:
    """Write the pack's tar to the binary file ``out`` (deterministic bytes)."""
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for b in members:
            info = tarfile.TarInfo(member_name(b))
            info.size = b.stored_size
            info.mode = 0o644
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with open(blob_path(b), "rb") as f:
                tar.addfile(info, f)


def split_pack(path: Path, wanted: dict[str, BlobRef], out_dir: Path, what: str, **fields) -> list[BlobRef]:
    """Extract the members of the pack at ``path`` into ``out_dir/<hex of stored digest>``; only regular files
    named as one of ``wanted`` (member name → blob) with exactly that blob's size. Returns what was extracted.
    ``fields``: the error fields of a refusal (the store, the pack's digest)."""
    got = []
    try:
        with tarfile.open(path, mode="r:") as tar:
            for m in tar:
                b = wanted.get(m.name)
                if b is None or not m.isreg() or m.size != b.stored_size:
                    raise VerificationError(f"{what}: pack member {m.name[:80]!r} is not one of its blobs", **fields)
                src = tar.extractfile(m)
                tmp = out_dir / (b.stored_digest.split(":", 1)[1] + ".part")
                with open(tmp, "wb") as f:
                    while chunk := src.read(1 << 20):  # type: ignore[union-attr]  # baseline (issue 46)
                        f.write(chunk)
                tmp.replace(tmp.with_suffix(""))
                got.append(b)
    except (tarfile.TarError, EOFError) as exc:
        raise VerificationError(f"{what}: not a pack ({cause(exc)})", **fields) from None
    return got


@dataclasses.dataclass(frozen=True)
class PackLayer:
    digest: str
    size: int
    first: str  # content digest of the first member
    count: int


class PackIndex:
    """Which layer holds a blob: single layers by content digest; packs by the digest range they start."""

    def __init__(self) -> None:
        self.singles: dict[str, tuple[str, int]] = {}  # content digest -> (layer digest, size)
        self._firsts: list[str] = []
        self._packs: list[PackLayer] = []

    def add_layers(self, layers: list[dict]) -> None:
        from cachetool.stores.oci.media import PACK_MEDIA_TYPE, A

        for l in layers:
            ann = l.get("annotations") or {}
            if l.get("mediaType") == PACK_MEDIA_TYPE and ann.get(A + "pack.first"):
                p = PackLayer(
                    str(l["digest"]), int(l["size"]), str(ann[A + "pack.first"]), int(ann.get(A + "pack.count") or 0)
                )
                i = bisect.bisect_left(self._firsts, p.first)
                if i < len(self._firsts) and self._firsts[i] == p.first and self._packs[i] == p:
                    continue
                self._firsts.insert(i, p.first)
                self._packs.insert(i, p)
            elif ann.get(A + "content.digest"):
                self.singles[str(ann[A + "content.digest"])] = (str(l["digest"]), int(l["size"]))

    def pack_of(self, content_digest: str) -> PackLayer | None:
        i = bisect.bisect_right(self._firsts, content_digest) - 1
        return self._packs[i] if i >= 0 else None

    def __bool__(self) -> bool:
        return bool(self._packs)


def pack_bytes(members: list[BlobRef], blob_path: Callable[[BlobRef], Path]) -> bytes:
    """A pack in memory (tests and small packs)."""
    buf = io.BytesIO()
    write_pack(members, blob_path, buf)
    return buf.getvalue()
