"""The index of a plain USTAR archive (what ``write_ctb`` writes), one ``pread`` of each member's 512-byte header:
Python's ``tarfile`` builds a ``TarInfo`` of every member, ~20 us each, 2 s or more for a ``.ctb`` of 100,000 blobs.

Only what tarfile would read the same way is answered: regular-file members (type ``0``), POSIX magic, no name
prefix, octal numbers, the unsigned checksum, ending at a zero block. Anything else (a link, a folder, a pax or GNU
header, a base-256 number, a bad checksum or number, a short read, no end block) answers None, and the caller reads
the archive with tarfile, which accepts or refuses it as it always has."""

from __future__ import annotations

import os

BLOCK = 512
_ZERO = bytes(BLOCK)
_MAGIC = b"ustar\x0000"
_NUMBERS = ((100, 108), (108, 116), (116, 124), (136, 148), (329, 337), (337, 345))  # mode .. devminor, not size


def _octal(field: bytes) -> int:
    """tarfile's ``nti`` for an octal field (up to the first NUL, blanks stripped); ValueError where it fails or
    where the field is base-256 (tarfile reads that, this does not)."""
    if field[:1] in (b"\x80", b"\xff"):
        raise ValueError("base-256")
    return int(field.split(b"\0", 1)[0].decode("ascii").strip() or "0", 8)


def _member(buf: bytes) -> tuple[str, int] | None:
    """(name, size) of a plain regular-file header, or None."""
    if buf[156:157] != b"0" or buf[257:265] != _MAGIC or buf[345] != 0:
        return None
    try:
        if _octal(buf[148:156]) != 256 + sum(buf) - sum(buf[148:156]):
            return None
        size = _octal(buf[124:136])
        if size < 0:  # int() takes a sign: a negative size would step back onto this header forever
            return None
        for a, b in _NUMBERS:  # tarfile parses them all; a bad one ends or refuses its reading
            _octal(buf[a:b])
    except (ValueError, UnicodeDecodeError):
        return None
    return buf[:100].split(b"\0", 1)[0].decode("utf-8", "surrogateescape"), size


def plain_members(fd: int, total: int) -> list[tuple[str, int, int]] | None:
    """(name, data offset, size) of each member of the archive open at ``fd`` (``total`` bytes long), in order, or
    None where tarfile must read it (see the module doc)."""
    out: list[tuple[str, int, int]] = []
    offset = 0
    while offset + BLOCK <= total:
        buf = os.pread(fd, BLOCK, offset)
        if len(buf) != BLOCK:
            return None
        if buf == _ZERO:
            return out
        member = _member(buf)
        if member is None:
            return None
        name, size = member
        out.append((name, offset + BLOCK, size))
        offset += BLOCK + -(-size // BLOCK) * BLOCK
    return None
