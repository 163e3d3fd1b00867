"""The artifact index ``compile_index.json``, its on-disk format: piece index → graph hash, shape, artifact file,
format, digest.

```json
{"schema": 1, "cache_key": "<hash10>",
 "pieces": {"0": {"graph_hash": "<sha256>", "shape": "general", "artifact": "artifact_general_<key>",
                  "format": "binary", "sha256": "<digest of the artifact>"}, ...}}
```
Identical pieces share one artifact file; lookups go by ``(graph_hash, shape)`` (:meth:`CompileIndex.find`) or by
piece (:meth:`CompileIndex.get`). This module only reads and writes the file: what is loaded, checked or compiled is
:mod:`compiler.artifact_manager`'s, the index's one owner.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compiler.layout import INDEX_FILE

INDEX_SCHEMA = 1


def shape_key(runtime_shape: int | None) -> str | int:
    return "general" if runtime_shape is None else int(runtime_shape)


def piece_key(piece: int, runtime_shape: int | None) -> str:
    """A piece's key in ``pieces``: ``"i"`` for the general shape, ``"i@size"`` for a compile size."""
    return str(piece) if runtime_shape is None else f"{piece}@{runtime_shape}"


@dataclass
class IndexEntry:
    graph_hash: str
    shape: str | int
    artifact: str
    format: str
    sha256: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "graph_hash": self.graph_hash,
            "shape": self.shape,
            "artifact": self.artifact,
            "format": self.format,
            "sha256": self.sha256,
        }


@dataclass
class CompileIndex:
    path: Path | None
    cache_key: str = ""
    pieces: dict[str, IndexEntry] = field(default_factory=dict)
    dirty: bool = False

    @classmethod
    def open(cls, path: Path | None, cache_key: str) -> CompileIndex:
        index = cls(path=path, cache_key=cache_key)
        if path is not None and path.is_file():
            try:
                data = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                return index
            if data.get("schema") == INDEX_SCHEMA:
                for k, v in data.get("pieces", {}).items():
                    index.pieces[k] = IndexEntry(
                        v["graph_hash"], v["shape"], v["artifact"], v.get("format", "binary"), v.get("sha256", "")
                    )
        return index

    def find(self, graph_hash: str, runtime_shape: int | None) -> IndexEntry | None:
        want = shape_key(runtime_shape)
        for entry in self.pieces.values():
            if entry.graph_hash == graph_hash and entry.shape == want:
                if self.path is not None and (self.path.parent / entry.artifact).exists():
                    return entry
        return None

    def get(self, piece: int, runtime_shape: int | None) -> IndexEntry | None:
        """What the index records for piece ``piece`` at that shape (whether or not its file is there)."""
        return self.pieces.get(piece_key(piece, runtime_shape))

    def record(self, piece: int, runtime_shape: int | None, entry: IndexEntry) -> None:
        key = piece_key(piece, runtime_shape)
        if self.pieces.get(key) != entry:
            self.pieces[key] = entry
            self.dirty = True

    def save(self) -> None:
        """Write the index, merged with what another process wrote meanwhile (a concurrent warm of the same rank
        folder): under an exclusive lock on the folder, re-read, add our entries, write through a private
        temporary file, rename."""
        if self.path is None or not self.dirty:
            return
        from compiler.cache_key import write_atomic

        fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            on_disk = CompileIndex.open(self.path, self.cache_key)
            merged = {**on_disk.pieces, **self.pieces}
            data = {
                "schema": INDEX_SCHEMA,
                "cache_key": self.cache_key,
                "pieces": {k: v.to_json() for k, v in sorted(merged.items(), key=lambda kv: _sort_key(kv[0]))},
            }
            write_atomic(self.path, json.dumps(data, indent=2) + "\n")
            self.pieces = merged
        finally:
            os.close(fd)  # releases the lock
        self.dirty = False


def _sort_key(k: str) -> tuple[int, int]:
    piece, _, shape = k.partition("@")
    return int(piece), int(shape) if shape else -1


# ---------------------------------------------------------------------- completeness
def incomplete_reason(directory: Path) -> str | None:
    """Why the prefix folder ``directory`` is not a complete cache, or None when it is one: its index names every
    piece (0 up) at the general shape and at each compile size its recorded config asks for, and every artifact
    it names is there. A compiling start writes ``cache_key_factors.json`` first and the index only once every
    piece has compiled, then one entry per piece at each compile size as the warm runs it: a warm stopped midway
    leaves no index, or one that lacks a size. (The AOT entry is not required: without it a start traces and
    still loads every piece.) Reads files only; no torch."""
    from compiler.cache_key import FACTORS_FILE, CacheKey
    from compiler.config import resolve_compile_sizes

    directory = Path(directory)
    try:
        config = CacheKey.read(directory / FACTORS_FILE).factors.values("config") or {}
        compilation = config.get("compilation_config") or {}
        sizes = resolve_compile_sizes(
            compilation.get("compile_sizes") or [], compilation.get("cudagraph_capture_sizes")
        )
    except FileNotFoundError:
        return f"no {FACTORS_FILE}"
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return f"{FACTORS_FILE} is not a readable cache key"
    try:
        data = json.loads((directory / INDEX_FILE).read_text())
    except FileNotFoundError:
        return f"no {INDEX_FILE}"
    except (OSError, ValueError):
        return f"{INDEX_FILE} is not readable JSON"
    pieces = data.get("pieces") if isinstance(data, dict) and data.get("schema") == INDEX_SCHEMA else None
    if not isinstance(pieces, dict) or not pieces:
        return f"{INDEX_FILE} names no pieces"
    return _missing_piece(pieces, sizes) or _missing_artifact(directory, pieces)


def _missing_piece(pieces: dict[str, Any], sizes: list[int]) -> str | None:
    """The first piece the index lacks: every piece it mentions, and those before it, at the general shape and at
    every compile size."""
    numbers = {k.partition("@")[0] for k in pieces}
    if not all(n.isascii() and n.isdigit() for n in numbers):
        return f"{INDEX_FILE} has a piece key that is not a piece number"
    last = min(max(int(n) for n in numbers), len(pieces))  # past len(pieces), one below is surely missing
    for i in range(last + 1):
        for size in [None, *sizes]:
            if piece_key(i, size) not in pieces:
                at = "" if size is None else f" for compile size {size}"
                return f"{INDEX_FILE} has no artifact of piece {i}{at}"
    return None


def _missing_artifact(directory: Path, pieces: dict[str, Any]) -> str | None:
    for key, entry in pieces.items():
        name = entry.get("artifact") if isinstance(entry, dict) else None
        if not isinstance(name, str) or name in ("", ".", "..") or "/" in name:
            return f"{INDEX_FILE} names no artifact file for piece {key}"
        if not (directory / name).exists():
            return f"artifact {name} of piece {key} is missing"
    return None
