"""What a cache folder holds, as a layout's scan finds it and a manifest lists it (files, folders, install units,
key folders): plain values, produced by the layouts and read by everyone who reads a manifest
(:mod:`cachetool.bundle.manifest` validates them)."""

from __future__ import annotations

import dataclasses

from cachetool.layouts.factors import Factors

__all__ = ["DirEntry", "FileEntry", "KeyFolder", "Unit"]


@dataclasses.dataclass(frozen=True)
class FileEntry:
    path: str  # relative POSIX path under the cache root
    mode: int  # permission bits
    size: int  # bytes of content
    digest: str  # "sha256:<hex>" of the content (= the blob's digest)

    def to_json(self) -> dict:
        return {"path": self.path, "mode": self.mode, "size": self.size, "digest": self.digest}


@dataclasses.dataclass(frozen=True)
class DirEntry:
    path: str
    mode: int

    def to_json(self) -> dict:
        return {"path": self.path, "mode": self.mode}


@dataclasses.dataclass(frozen=True)
class Unit:
    """An install unit: a folder renamed into place atomically (a rank folder, or a Triton kernel folder)."""

    path: str
    key: str | None  # the cache key (hash folder name) it belongs to
    rank: str | None  # "rank_{r}_{dp}" or None

    def to_json(self) -> dict:
        return {"path": self.path, "key": self.key, "rank": self.rank}


@dataclasses.dataclass(frozen=True)
class KeyFolder:
    """One hash folder of the tree, as the manifest lists it: its name, its kind and the factors its
    ``cache_key_factors.json`` records (read by its engine: ``Engine.compare_keys``, ``Engine.check_factors``)."""

    hash: str
    kind: str  # one of its engine's key kinds (Engine.key_kinds: "piecewise", "aot", ...)
    factors: Factors | None  # env, config, code, compiler (or another engine's own); JSON is parsed on the way in

    def __post_init__(self) -> None:
        object.__setattr__(self, "factors", Factors.parse(self.factors))

    def recorded(self, kind: str) -> dict | None:
        """The values of factor ``kind`` where this key folder is of that kind (cachetool's own key folders:
        :meth:`Factors.recording`); None otherwise."""
        return self.factors.values(kind) if self.kind == kind and self.factors is not None else None

    def to_json(self) -> dict:
        return {
            "hash": self.hash,
            "kind": self.kind,
            "factors": self.factors.to_json() if self.factors is not None else None,
        }
