"""The bundle manifest: schema, canonical JSON and strict validation.

A manifest lists every file of a packed cache tree (relative path, mode, size, sha256 of the content), the blob
table (each unique content once), the cache keys and their hash factors, the environment fingerprint, the
ranks and the *install units* (the folders an install renames into place atomically, one per rank folder).

The manifest is the signed object, so it is serialised canonically (sorted keys, no whitespace, ASCII) and a
reader accepts only canonical bytes: no duplicate JSON keys, no unknown fields, no unknown schema version.
Paths are validated while parsing (:mod:`cachetool.bundle.paths`), once, for everyone who reads a manifest
(install, inspect, diff, push).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import posixpath
import re
from typing import Any

from cachetool.bundle import engine_rules
from cachetool.bundle.paths import validate_relpath
from cachetool.digests import BlobRef, is_digest
from cachetool.errors import ManifestError, UnsupportedSchemaError, cause
from cachetool.layouts.entries import DirEntry, FileEntry, KeyFolder, Unit
from cachetool.layouts.factors import short_repr
from cachetool.version import __version__

SCHEMA_VERSION = 1
MEDIA_TYPE = "application/vnd.cachetool.manifest.v1+json"
MAX_FILE_SIZE = 64 << 30  # one file; larger is refused as implausible
MAX_FILES = 1_000_000
# A layout or key kind is an engine's name for it, opaque here: checked for shape only, so a bundle of a layout this
# cachetool does not know (a newer engine's) still parses, lists and collects.
KIND_RE = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_digest(manifest_bytes: bytes) -> str:
    """``"sha256:<hex>"`` of the manifest's canonical bytes: its address in a store."""
    return "sha256:" + sha256_hex(manifest_bytes)


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii")


def platform_key(fingerprint: dict, engine: engine_rules.EngineRules | None = None) -> str:
    """Short platform key for multi-platform refs: ``cuda-sm90-torch2.11.0+cu130``, ``cpu-x86_64-torch2.13.0+cpu``;
    the engine whose caches the bundle holds (``engine``, else the registered one that recognizes the fingerprint)
    may lead it and name some of its own fields after the device (``EngineRules.platform_prefix`` and
    ``platform_fields``: ``<engine><version>-cpu-x86_64-avx2-torch2.13.0+cpu``).

    A Triton-only bundle without torch gets ``...-triton<version>`` instead of the torch part.
    """
    fp = fingerprint or {}
    engine = engine or engine_rules.catalog().for_fingerprint(fp)
    device = fp.get("device") or "cpu"
    if device == "cuda":
        head = f"cuda-{fp.get('capability') or 'unknown'}"
    else:
        head = f"{device}-{fp.get('arch') or 'unknown'}"
    head += "".join(f"-{fp[name]}" for name in engine.platform_fields if fp.get(name))
    prefix = engine.platform_prefix(fp)
    if prefix:
        head = f"{prefix}-{head}"
    if fp.get("torch"):
        return f"{head}-torch{fp['torch']}"
    if fp.get("triton"):
        return f"{head}-triton{fp['triton']}"
    return head


def _check_mode(mode: Any, path: str, directory: bool) -> int:
    # Only permission bits: no file-type bits (links, devices, fifos) and no setuid/setgid/sticky.
    if not isinstance(mode, int) or isinstance(mode, bool) or mode < 0 or mode > 0o777:
        raise ManifestError(f"manifest entry {path!r} has mode {mode!r}: only permission bits 0..0o777 are allowed")
    if directory and mode & 0o700 != 0o700:
        raise ManifestError(f"manifest folder {path!r} has mode {oct(mode)}: folders must be owner rwx")
    return mode


def _check_digest(d: Any, what: str) -> str:
    if not is_digest(d):
        raise ManifestError(f"manifest {what} {d!r} is not 'sha256:<64 hex>'")
    return d


def _check_size(s: Any, what: str) -> int:
    if not isinstance(s, int) or isinstance(s, bool) or s < 0 or s > MAX_FILE_SIZE:
        raise ManifestError(f"manifest {what} {s!r} is not a size in 0..{MAX_FILE_SIZE}")
    return s


def _check_fingerprint(fp: Any) -> dict:
    # Flat: field name -> string or null. Preflight, platform keys and messages rely on it (a list as the
    # device must be a format error, not a crash).
    if not isinstance(fp, dict):
        raise ManifestError("manifest fingerprint is not an object")
    for k, v in fp.items():
        if not re.match(r"^[A-Za-z0-9_.-]{1,64}$", k):
            raise ManifestError(f"manifest fingerprint field {k[:64]!r} is not a plain name")
        if v is not None and (not isinstance(v, str) or len(v) > 256 or any(ord(c) < 32 for c in v)):
            raise ManifestError(f"manifest fingerprint {k!r} is {short_repr(v)}: expected a short string or null")
    return fp


_TOP_KEYS = {
    "schema",
    "media_type",
    "tool",
    "layout",
    "save_format",
    "keys",
    "fingerprint",
    "ranks",
    "units",
    "dirs",
    "files",
    "blobs",
}


@dataclasses.dataclass(frozen=True)
class Manifest:
    layout: str
    files: tuple[FileEntry, ...]
    blobs: tuple[BlobRef, ...]
    units: tuple[Unit, ...]
    dirs: tuple[DirEntry, ...] = ()
    keys: tuple[KeyFolder, ...] = ()
    fingerprint: dict = dataclasses.field(default_factory=dict)
    ranks: tuple[str, ...] = ()
    save_format: str | None = None
    tool_version: str = __version__
    schema: int = SCHEMA_VERSION

    # ---- serialisation -------------------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {
            "schema": self.schema,
            "media_type": MEDIA_TYPE,
            "tool": {"name": "cachetool", "version": self.tool_version},
            "layout": self.layout,
            "save_format": self.save_format,
            "keys": [k.to_json() for k in sorted(self.keys, key=lambda k: (k.kind, k.hash))],
            "fingerprint": self.fingerprint,
            "ranks": sorted(self.ranks),
            "units": [u.to_json() for u in sorted(self.units, key=lambda u: u.path)],
            "dirs": [d.to_json() for d in sorted(self.dirs, key=lambda d: d.path)],
            "files": [f.to_json() for f in sorted(self.files, key=lambda f: f.path)],
            "blobs": [
                {"digest": b.digest, "size": b.size, "stored_digest": b.stored_digest, "stored_size": b.stored_size}
                for b in sorted(self.blobs, key=lambda b: b.digest)
            ],
        }

    def to_bytes(self) -> bytes:
        data = canonical_json(self.to_json())
        # Validate what we emit with the same rules a reader applies.
        Manifest.from_bytes(data)
        return data

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        """Parse and validate; raise :class:`ManifestError` (a VerificationError) on anything unexpected.

        One section at a time (header, keys, ranks, units, blobs, folders, files), then the one check of the
        tree as a whole (:func:`_check_tree`), then that the bytes are the canonical form of what was read."""
        obj = _load_json(data)
        _check_header(obj)
        keys = _parse_keys(obj["keys"])
        ranks = _parse_ranks(obj["ranks"])
        units = _parse_units(obj["units"], ranks)
        blobs = _parse_blobs(obj["blobs"])
        seen: set[str] = set()  # every path, folders and files: none may appear twice
        dirs = _parse_dirs(obj["dirs"], seen)
        files = _parse_files(obj["files"], blobs, seen)
        _check_tree(units, dirs, files)
        m = cls(
            layout=obj["layout"],
            files=tuple(files),
            blobs=tuple(blobs.values()),
            units=tuple(units),
            dirs=tuple(dirs),
            keys=tuple(keys),
            fingerprint=obj["fingerprint"],
            ranks=tuple(ranks),
            save_format=obj["save_format"],
            tool_version=obj["tool"]["version"],
            schema=obj["schema"],
        )
        if canonical_json(m.to_json()) != bytes(data):
            raise ManifestError("manifest bytes are not canonical JSON (sorted keys, no spaces, sorted lists)")
        return m

    # ---- queries -------------------------------------------------------------------------------------------
    @functools.cached_property
    def _units_by_path(self) -> dict[str, Unit]:
        return {u.path: u for u in self.units}

    @functools.cached_property
    def _blobs_by_digest(self) -> dict[str, BlobRef]:
        return {b.digest: b for b in self.blobs}

    def unit_of(self, path: str) -> Unit | None:
        by_path = self._units_by_path
        q = path
        while q:
            if q in by_path:
                return by_path[q]
            q = posixpath.dirname(q)
        return None

    def blob(self, digest: str) -> BlobRef:
        return self._blobs_by_digest[digest]

    @property
    def raw_size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def unique_size(self) -> int:
        return sum(b.size for b in self.blobs)

    @property
    def stored_size(self) -> int:
        return sum(b.stored_size for b in self.blobs)

    @property
    def platform(self) -> str:
        return platform_key(self.fingerprint)


@dataclasses.dataclass(frozen=True)
class StoredSummary:
    """What a store reads of a stored manifest (gc's mark phase, a pinned ref's entry): its fingerprint and blob
    table only. Read by :func:`stored_summary` without the rest of the schema, so a bundle that a newer cachetool
    wrote (another layout, more fields) never stops an older one's gc."""

    fingerprint: dict
    blobs: tuple[BlobRef, ...]

    @property
    def stored_size(self) -> int:
        return sum(b.stored_size for b in self.blobs)

    @property
    def platform(self) -> str:
        return platform_key(self.fingerprint)


def stored_summary(data: bytes) -> StoredSummary:
    """The fingerprint and blob table of a stored manifest's bytes, each checked for shape; anything else in it is
    not read. A document that is not a manifest at all is a one-line :class:`ManifestError`."""
    obj = _load_json(data)
    if not isinstance(obj.get("blobs"), list):
        raise ManifestError("manifest 'blobs' is missing or not a list")
    fingerprint = _check_fingerprint(obj.get("fingerprint") or {})
    return StoredSummary(fingerprint, tuple(_parse_blobs(obj["blobs"]).values()))


# ---- parsing, one section at a time (Manifest.from_bytes) ------------------------------------------------------
def _no_dupes(pairs) -> dict:
    d = {}
    for k, v in pairs:
        if k in d:
            raise ManifestError(f"manifest has the JSON key {k!r} twice")
        d[k] = v
    return d


def _load_json(data: bytes) -> dict:
    """The manifest's JSON object: ASCII, at most 512 MiB, no key twice, not nested too deeply."""
    if not isinstance(data, (bytes, bytearray)):
        raise ManifestError("manifest is not bytes")
    if len(data) > 512 << 20:
        raise ManifestError("manifest is larger than 512 MiB")
    try:
        obj = json.loads(bytes(data).decode("ascii"), object_pairs_hook=_no_dupes)
    except ManifestError:
        raise
    except (UnicodeDecodeError, ValueError) as exc:
        raise ManifestError(f"manifest is not valid ASCII JSON ({_json_error(exc)})") from None
    except RecursionError:
        raise ManifestError("manifest JSON is nested too deeply") from None
    if not isinstance(obj, dict):
        raise ManifestError("manifest is not a JSON object")
    return obj


def _json_error(exc: ValueError) -> str:
    """Where the JSON went wrong, in words (no exception class name)."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    return cause(exc)


def _check_header(obj: dict) -> None:
    """Schema version, exactly the known top-level fields, media type, tool, layout, save format, fingerprint,
    and that every table is a list (the file table within :data:`MAX_FILES`)."""
    schema = obj.get("schema")
    if schema != SCHEMA_VERSION:
        raise UnsupportedSchemaError(
            f"unknown manifest schema version {schema!r} (this cachetool {__version__} reads {SCHEMA_VERSION})"
        )
    if set(obj) != _TOP_KEYS:
        extra, missing = sorted(set(obj) - _TOP_KEYS), sorted(_TOP_KEYS - set(obj))
        raise ManifestError(f"manifest fields differ from schema {SCHEMA_VERSION}: unknown {extra}, missing {missing}")
    if obj["media_type"] != MEDIA_TYPE:
        raise ManifestError(f"manifest media_type {obj['media_type']!r} is not {MEDIA_TYPE}")
    tool = obj["tool"]
    if not isinstance(tool, dict) or set(tool) != {"name", "version"} or not isinstance(tool["version"], str):
        raise ManifestError("manifest 'tool' must be {name, version}")
    if not isinstance(obj["layout"], str) or not KIND_RE.match(obj["layout"]):
        raise ManifestError(
            f"manifest layout {short_repr(obj['layout'])} is not a layout name (lowercase letters, "
            "digits, '.', '_', '-')"
        )
    if obj["save_format"] not in (None, "binary", "unpacked", "mixed"):
        raise ManifestError(f"manifest save_format {obj['save_format']!r} is unknown")
    _check_fingerprint(obj["fingerprint"])
    for name in ("keys", "ranks", "units", "dirs", "files", "blobs"):
        if not isinstance(obj[name], list):
            raise ManifestError(f"manifest {name!r} is not a list")
    if len(obj["files"]) > MAX_FILES:
        raise ManifestError(f"manifest lists more than {MAX_FILES} files")


def _exact(entry: Any, keys: set, what: str) -> dict:
    """``entry`` as an object with exactly the fields ``keys``."""
    if not isinstance(entry, dict) or set(entry) != keys:
        got = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
        raise ManifestError(f"manifest {what} entry has fields {got}, expected {sorted(keys)}")
    return entry


def _parse_keys(entries: list) -> list[KeyFolder]:
    keys = []
    for k in entries:
        k = _exact(k, {"hash", "kind", "factors"}, "key")
        if not isinstance(k["hash"], str) or not re.match(r"^[A-Za-z0-9_.-]{1,128}$", k["hash"]):
            raise ManifestError(f"manifest cache key {k['hash']!r} is not a plain name")
        if not isinstance(k["kind"], str) or not KIND_RE.match(k["kind"]):
            raise ManifestError(
                f"manifest cache key kind {short_repr(k['kind'])} is not a kind name (lowercase "
                "letters, digits, '.', '_', '-')"
            )
        if k["factors"] is not None and not isinstance(k["factors"], dict):
            raise ManifestError("manifest cache key factors are not an object")
        keys.append(KeyFolder(k["hash"], k["kind"], k["factors"]))  # type: ignore[arg-type]  # baseline (issue 46)
    return keys


def _parse_ranks(entries: list) -> list[str]:
    for r in entries:
        if not isinstance(r, str) or not re.match(r"^rank_\d+_\d+$", r):
            raise ManifestError(f"manifest rank {r!r} is not 'rank_<r>_<dp>'")
    return list(entries)


def _parse_units(entries: list, ranks: list[str]) -> list[Unit]:
    """The install units: safe paths, known ranks, none twice, none inside another."""
    units = []
    for u in entries:
        u = _exact(u, {"path", "key", "rank"}, "unit")
        validate_relpath(u["path"], "unit path")
        if u["rank"] is not None and u["rank"] not in ranks:
            raise ManifestError(f"manifest unit {u['path']!r} names rank {u['rank']!r} not in ranks")
        if u["key"] is not None and not isinstance(u["key"], str):
            raise ManifestError(f"manifest unit {u['path']!r} has a bad key")
        units.append(Unit(u["path"], u["key"], u["rank"]))
    unit_paths = sorted(u.path for u in units)
    if len(set(unit_paths)) != len(unit_paths):
        raise ManifestError("manifest lists an install unit twice")
    for a, b in zip(unit_paths, unit_paths[1:]):
        if b.startswith(a + "/"):
            raise ManifestError(f"manifest install units {a!r} and {b!r} are nested")
    return units


def _parse_blobs(entries: list) -> dict[str, BlobRef]:
    """The blob table by content digest (each content once)."""
    blobs: dict[str, BlobRef] = {}
    for b in entries:
        b = _exact(b, {"digest", "size", "stored_digest", "stored_size"}, "blob")
        ref = BlobRef(
            _check_digest(b["digest"], "blob digest"),
            _check_size(b["size"], "blob size"),
            _check_digest(b["stored_digest"], "blob stored digest"),
            _check_size(b["stored_size"], "blob stored size"),
        )
        if ref.digest in blobs:
            raise ManifestError(f"manifest lists blob {ref.digest} twice")
        blobs[ref.digest] = ref
    return blobs


def _new_path(p: str, seen: set[str]) -> str:
    if p in seen:
        raise ManifestError(f"manifest lists the path {p!r} twice")
    seen.add(p)
    return p


def _parse_dirs(entries: list, seen: set[str]) -> list[DirEntry]:
    dirs = []
    for d in entries:
        d = _exact(d, {"path", "mode"}, "folder")
        p = _new_path(validate_relpath(d["path"], "folder path"), seen)
        dirs.append(DirEntry(p, _check_mode(d["mode"], p, True)))
    return dirs


def _parse_files(entries: list, blobs: dict[str, BlobRef], seen: set[str]) -> list[FileEntry]:
    """The files, each naming a blob of its size; every blob used by some file."""
    files = []
    used = set()
    for f in entries:
        f = _exact(f, {"path", "mode", "size", "digest"}, "file")
        p = _new_path(validate_relpath(f["path"], "file path"), seen)
        fe = FileEntry(
            p,
            _check_mode(f["mode"], p, False),
            _check_size(f["size"], f"size of {p!r}"),
            _check_digest(f["digest"], f"digest of {p!r}"),
        )
        blob = blobs.get(fe.digest)
        if blob is None:
            raise ManifestError(f"manifest file {p!r} names blob {fe.digest} missing from the blob table")
        if blob.size != fe.size:
            raise ManifestError(f"manifest file {p!r} declares {fe.size} bytes but its blob declares {blob.size}")
        used.add(fe.digest)
        files.append(fe)
    unused = set(blobs) - used
    if unused:
        raise ManifestError(f"manifest blob table has {len(unused)} blob(s) no file uses")
    return files


def _check_tree(units: list[Unit], dirs: list[DirEntry], files: list[FileEntry]) -> None:
    """The invariant of the tree as a whole: no path lies under a file, and every file and folder lies inside
    exactly one install unit (units are not nested, so at most one), and no unit is a file. Each distinct parent
    folder is looked at once (100,000 files share a few hundred)."""
    file_set = {f.path for f in files}
    dir_set = {d.path for d in dirs}
    unit_set = {u.path for u in units}
    parents = {posixpath.dirname(p) for p in file_set | dir_set}
    ancestors: set[str] = set()  # every folder on the way to a path, the parents themselves included
    for parent in parents:
        while parent and parent not in ancestors:
            ancestors.add(parent)
            parent = posixpath.dirname(parent)
    under_file = ancestors & file_set
    if under_file:
        top = min(under_file)
        p = min(q for q in file_set | dir_set if q.startswith(top + "/"))
        raise ManifestError(f"manifest path {p!r} lies under the file {top!r}")
    in_unit: dict[str, bool] = {}  # folder -> whether it is a unit or lies in one

    def inside(q: str) -> bool:
        walked = []
        while q and q not in in_unit and q not in unit_set:
            walked.append(q)
            q = posixpath.dirname(q)
        answer = bool(q) and (q in unit_set or in_unit[q])
        for w in walked:
            in_unit[w] = answer
        return answer

    for p in sorted(file_set):
        if not (p in unit_set or inside(posixpath.dirname(p))):
            raise ManifestError(f"manifest file {p!r} lies in no install unit")
    for p in sorted(dir_set):
        if not inside(p) and not any(u.startswith(p + "/") for u in unit_set):
            raise ManifestError(f"manifest folder {p!r} lies in no install unit")
    if unit_set & file_set:
        raise ManifestError("manifest install unit is a file")
