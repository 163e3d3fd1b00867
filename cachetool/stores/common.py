"""What the store implementations share: ref-index JSON, size bounds, resumable downloads.

Digests and blob refs live in :mod:`cachetool.digests`, atomic writes in :mod:`cachetool.atomic`, transfer counters
in :mod:`cachetool.stores.base`."""

from __future__ import annotations

import datetime as _dt
import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from cachetool import bounds
from cachetool.digests import hexof
from cachetool.errors import OversizeBlobError, StoreError, VerificationError, cause
from cachetool.retry import pause
from cachetool.stores.base import RefEntry, RefIndex, TransferCounters

REF_FORMAT = "cachetool.ref.v1"
# Bounds on what a store may hand back for one object (manifest.py and signing.py refuse larger ones anyway; this
# keeps a hostile store from filling memory first).
MAX_MANIFEST = 512 << 20
MAX_SIGNATURE = 1 << 30
MAX_REF = 16 << 20
# Downloads read in small pieces: a read cut mid-piece loses that piece, and what was written is resumed.
DL_CHUNK = 64 << 10


def now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def index_to_json(index: RefIndex) -> bytes:
    doc = {
        "format": REF_FORMAT,
        "name": index.name,
        "tag": index.tag,
        "entries": [
            {
                "manifest_digest": e.manifest_digest,
                "platform": e.platform,
                "fingerprint": e.fingerprint,
                "size": e.size,
                "created": e.created,
            }
            for e in index.entries
        ],
    }
    return json.dumps(doc, sort_keys=True, indent=1).encode() + b"\n"


_PLATFORM_RE = re.compile(r"^[\x21-\x7e]{1,200}$")  # printable, no spaces: it is printed and matched
_TEXT_RE = re.compile(r"^[\x20-\x7e]{0,256}$")


def ref_entry(manifest_digest, platform, fingerprint, size, created) -> RefEntry:
    """A :class:`RefEntry` from what a store returned, checked: what a ref says is printed (``ls``, the reasons a
    pull misses), so a hostile ref must not bring newlines or terminal escapes into one-line messages. Raises
    ValueError / TypeError / VerificationError."""
    hexof(manifest_digest)
    if not isinstance(platform, str) or not _PLATFORM_RE.match(platform):
        raise ValueError(f"platform {str(platform)[:40]!r} is not printable text without spaces")
    if not isinstance(fingerprint, dict) or not all(
        isinstance(k, str) and _TEXT_RE.match(k) and (v is None or isinstance(v, str) and _TEXT_RE.match(v))
        for k, v in fingerprint.items()
    ):
        raise ValueError("fingerprint is not an object of printable strings")
    if not isinstance(created, str) or not _TEXT_RE.match(created):
        raise ValueError(f"created {str(created)[:40]!r} is not printable text")
    if isinstance(size, bool) or int(size) < 0:
        raise ValueError(f"size {size!r} is not a size")
    return RefEntry(manifest_digest, platform, dict(fingerprint), int(size), created)


def index_from_json(data: bytes, where: str, **fields) -> RefIndex:
    """The ref index in ``data`` (read from ``where``); StoreError with ``fields`` when it is not one."""
    try:
        doc = json.loads(data)
        if doc.get("format") != REF_FORMAT:
            raise ValueError(f"format {doc.get('format')!r}")
        entries = []
        for e in doc["entries"]:
            entries.append(
                ref_entry(
                    e["manifest_digest"],
                    e["platform"],
                    e.get("fingerprint") or {},
                    e.get("size") or 0,
                    e.get("created") or "",
                )
            )
        return RefIndex(str(doc["name"]), str(doc["tag"]), tuple(entries))
    except (ValueError, KeyError, TypeError, AttributeError, VerificationError) as exc:
        raise StoreError(f"{where} is not a cachetool ref ({exc})", **fields) from None
    except RecursionError:
        raise StoreError(f"{where} is not a cachetool ref (JSON nested too deeply)", **fields) from None


def write_bounded(
    chunks: Iterable[bytes], out, room: int, what: str, count: Callable[[int], None], fields: dict | None = None
) -> None:
    """Write ``chunks`` to ``out``, refusing to go past ``room`` bytes: a store can't fill the disk with a blob
    larger than the (signed) manifest says. ``count`` receives each piece's length as it is written; ``fields``:
    the refusal's error fields (store, key). A bound applied by the caller (:mod:`cachetool.bounds`: ``pull
    --timeout``, a stop signal) is checked at every chunk, so a store that streams steadily stops there too."""
    for chunk in chunks:
        bounds.check(what, **(fields or {}))
        if len(chunk) > room:
            raise OversizeBlobError(f"{what}: the store sends more bytes than the manifest declares", **(fields or {}))
        out.write(chunk)
        room -= len(chunk)
        count(len(chunk))


def resume_offset(dest: Path, total: int) -> int:
    """How many bytes of ``dest`` can be kept for a resumed download of ``total`` bytes (0: start over)."""
    try:
        n = dest.stat().st_size
    except FileNotFoundError:
        return 0
    if n > total:
        dest.unlink()
        return 0
    return n


_CONTENT_RANGE_RE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


def body_start(offset: int, status: int, content_range: str | None) -> int | None:
    """Where the body of a reply to ``GET`` (with ``Range: bytes=<offset>-`` when ``offset``) begins in the blob:
    0 for a 200 (the server ignored the Range and sends everything), ``offset`` for a 206 whose Content-Range
    starts there, None for anything else (a 206 for other bytes cannot be appended: start over)."""
    if status == 200:
        return 0
    if status == 206 and offset:
        m = _CONTENT_RANGE_RE.match((content_range or "").strip())
        if m and int(m.group(1)) == offset:
            return offset
    return None


def download_resumable(
    dest: Path,
    size: int,
    what: str,
    open_from: Callable[[int], tuple[Iterable[bytes], int, str | None] | None],
    cut_errors: tuple[type[BaseException], ...],
    cut_error: Callable[[BaseException], Exception],
    counters: TransferCounters,
    max_attempts: int,
    fields: dict | None = None,
) -> None:
    """Download a blob of ``size`` stored bytes to ``dest``, keeping what a cut transfer left and resuming it.

    ``open_from(offset)`` asks the store for the bytes from ``offset`` on and returns ``(chunks, status,
    content_range)``: the body, the HTTP status and the Content-Range header of the reply; or None when the store
    refuses the range (416: the partial file is already whole or longer: start over). The reply decides where the
    body goes (:func:`body_start`): a 206 for ``offset`` is appended, a 200 replaces the partial file, anything
    else starts over. A body cut mid-stream raises one of ``cut_errors``: after a backoff the next attempt resumes
    with a Range request; the last attempt raises ``cut_error(exc)``. Never more than ``size`` bytes are written
    (:func:`write_bounded`). ``fields``: the error fields (store, key) of a refusal or of giving up.
    """
    for attempt in range(max_attempts):
        offset = resume_offset(dest, size)
        if offset == size:
            return
        opened = open_from(offset)
        start = None if opened is None else body_start(offset, opened[1], opened[2])
        if start is None:
            close = getattr(opened[0], "close", None) if opened is not None else None
            if close:
                close()
            dest.unlink(missing_ok=True)
            continue
        chunks = opened[0]  # type: ignore[index]  # baseline (issue 46)
        if start:
            counters.resumed()
        try:
            with open(dest, "ab" if start else "wb") as out:
                write_bounded(chunks, out, size - start, what, counters.down, fields)
            return
        except cut_errors as exc:
            if attempt + 1 >= max_attempts:
                raise cut_error(exc) from None
            pause(what, attempt, f"transfer cut ({cause(exc)}); resuming")
    raise StoreError(f"{what}: gave up after {max_attempts} attempts", **(fields or {}))
