"""The typed results of the bundle and store verbs of :mod:`cachetool.api` (``pack``, ``keygen``, ``sign``,
``inspect``, ``verify``, ``ls``, ``rm``); the others have theirs beside the code that makes them
(``InstallResult``, ``PushResult``, ``PullResult``, ``PullOutcome``, ``GcReport``, ``Difference``). Each has
``to_json()``: the fields of the verb's ``--json`` object."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Sizes:
    raw: int  # the files' bytes
    unique: int  # after deduplicating identical files
    compressed: int  # the zstd blobs, what a store holds

    @classmethod
    def of(cls, manifest: Any) -> Sizes:
        return cls(manifest.raw_size, manifest.unique_size, manifest.stored_size)


class _Dict:
    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]


@dataclasses.dataclass(frozen=True)
class PackResult(_Dict):
    output: str
    manifest_digest: str
    platform: str
    layout: str
    ranks: list[str]
    files: int
    unique_blobs: int
    signed_by: list[str]  # key ids (64 hex), empty when unsigned
    bytes: Sizes


@dataclasses.dataclass(frozen=True)
class KeyPair(_Dict):
    private_key: str
    public_key: str
    key_id: str


@dataclasses.dataclass(frozen=True)
class SignResult(_Dict):
    output: str
    key_id: str
    manifest_digest: str


@dataclasses.dataclass(frozen=True)
class BundleInfo(_Dict):
    """What ``inspect`` shows of a bundle (nothing verified)."""

    bundle: str
    manifest_digest: str
    schema: int
    tool_version: str
    layout: str
    save_format: str | None
    platform: str
    fingerprint: dict[str, Any]
    signed_by: list[str]
    keys: list[dict[str, Any]]
    ranks: list[str]
    units: list[str]
    files: int
    unique_blobs: int
    bytes: Sizes
    file_list: list[dict[str, Any]]
    key_lines: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # key hash -> its engine's lines


@dataclasses.dataclass(frozen=True)
class VerifyResult(_Dict):
    bundle: str
    manifest_digest: str
    key_id: str | None
    blobs: int
    files: int
    verified: bool = True


@dataclasses.dataclass(frozen=True)
class RefRow(_Dict):
    """One platform's bundle under a tag (a row of ``ls``)."""

    ref: str
    platform: str
    created: str
    size: int
    manifest_digest: str
    fingerprint: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Listing(_Dict):
    store: str
    refs: list[RefRow]


@dataclasses.dataclass(frozen=True)
class RemoveResult(_Dict):
    ref: str
    removed: str  # a platform, or "all"
    remaining: list[str]  # the tag's platforms left (empty: the tag is gone)
