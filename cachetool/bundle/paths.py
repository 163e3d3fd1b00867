"""What a path in a bundle may be: relative, normalised POSIX, no control, bidirectional or surrogate character,
no backslash, no name longer than a file system allows, nothing under the reserved ``.cachetool`` prefix. Every
path of a manifest passes :func:`validate_relpath` while it is parsed; pack checks the tree's paths with it too."""

from __future__ import annotations

import posixpath
import re
import unicodedata
from typing import Any

from cachetool.errors import UnsafePathError
from cachetool.layouts.factors import short_repr

MAX_PATH_LEN = 4096
RESERVED_PREFIX = ".cachetool"  # staging folders in the cache root; no bundle may write there

# Characters no path may hold: every Unicode control (Cc: C0, DEL, C1 such as NEL U+0085 and CSI U+009B, which
# terminals act on), surrogates (Cs: a file name that is not valid UTF-8), line and paragraph separators, and the
# bidirectional formatting controls (Cf) that make a printed path read differently from what it is.
_BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_REFUSED_CATEGORIES = frozenset({"Cc", "Cs", "Zl", "Zp"})
MAX_NAME_BYTES = 255  # NAME_MAX of Linux file systems: one path component, in UTF-8 bytes
# The same refusal for an ASCII path (nearly every path), in one scan: C0 controls, DEL and the backslash.
_UNSAFE_ASCII = re.compile(r"[\x00-\x1f\x7f\\]")


def unsafe_char(path: str) -> str | None:
    """The first character of ``path`` that no bundle path may hold (see above), or None."""
    if path.isascii():
        found = _UNSAFE_ASCII.search(path)
        return found.group() if found else None
    for c in path:
        if c in _BIDI_CONTROLS or c == "\\" or unicodedata.category(c) in _REFUSED_CATEGORIES:
            return c
    return None


def short_path(path: str, limit: int = 80) -> str:
    """``repr`` of a path for one-line messages, cut in the middle when long (escapes stay escaped)."""
    r = ascii(path)
    return r if len(r) <= limit else f"{r[: limit // 2]}...{r[-(limit // 2 - 3) :]} ({len(path)} characters)"


def validate_relpath(path: Any, what: str = "path") -> str:
    """Return ``path`` if it is a safe, normalised, relative POSIX path; raise :class:`UnsafePathError`."""
    if not isinstance(path, str) or not path:
        raise UnsafePathError(f"manifest {what} {short_repr(path)} is not a non-empty string")
    if len(path) > MAX_PATH_LEN:
        raise UnsafePathError(f"manifest {what} {short_path(path)} is longer than {MAX_PATH_LEN} characters")
    bad = unsafe_char(path)
    if bad is not None:
        kind = "a backslash" if bad == "\\" else f"the control character U+{ord(bad):04X}"
        raise UnsafePathError(f"manifest {what} {short_path(path)} contains {kind}")
    if path.startswith("/") or re.match(r"^[A-Za-z]:", path):
        raise UnsafePathError(f"manifest {what} {short_path(path)} is absolute")
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise UnsafePathError(f"manifest {what} {short_path(path)} has an empty, '.' or '..' component")
    if posixpath.normpath(path) != path:
        raise UnsafePathError(f"manifest {what} {short_path(path)} is not normalised")
    if parts[0].startswith(RESERVED_PREFIX):
        raise UnsafePathError(f"manifest {what} {short_path(path)} uses the reserved prefix {RESERVED_PREFIX!r}")
    long = None
    if len(path.encode("utf-8")) > MAX_NAME_BYTES:  # no name is longer than its path: only then measure each
        long = next((p for p in parts if len(p.encode("utf-8")) > MAX_NAME_BYTES), None)
    if long is not None:
        raise UnsafePathError(
            f"manifest {what} {short_path(path)} has a name of {len(long.encode('utf-8'))} bytes; "
            f"file systems allow {MAX_NAME_BYTES}"
        )
    return path
