"""A cache key's recorded hash factors, and how two differ, as a key folder records them and a bundle holds them:
engine-neutral (a layout's scan reads them; the engines compare them).

A key folder records its factors as ``{name: {"hash", "values"[, "evidence"]}}`` (the native engine's ``env``,
``config``, ``code``, ``compiler``; the vLLM engine's add ``serve``, ``inductor``, ``launch``): the manifest,
``diff`` and the preflight read them as :class:`Factors`, and an engine (``Engine.compare_keys``) names the fields
that differ as :class:`Difference` rows. A file of another shape is kept as it was read (:attr:`Factors.raw`)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

UNSET = "<unset>"  # the value of a field one side lacks (the text the compiler's comparison uses too)


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters for a one-line message (whitespace kept: it may be the
    difference)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 2] + " …"


def also_named(names: list[str], limit: int | None = 3) -> str:
    """`` (also: a, b, c, ...)`` naming what else differs after the first (``names``: the rest), or nothing: the one
    tail of every refusal that names a first difference."""
    if not names:
        return ""
    shown = names if limit is None else names[:limit]
    return f" (also: {', '.join(shown)}{', ...' if len(shown) < len(names) else ''})"


class Factors:
    """A key folder's recorded factors, read once; nothing downstream probes the nested JSON."""

    __slots__ = ("raw",)

    def __init__(self, raw: dict[str, Any]):
        self.raw = raw

    @classmethod
    def recording(cls, name: str, values: dict[str, Any]) -> Factors:
        """One factor ``name`` recording ``values``, its hash the sha256 of their sorted JSON: how cachetool's own key
        folders (a JIT cache's facts, where a folder's pieces were saved) record what they stand for."""
        digest = hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()
        return cls({name: {"hash": digest, "values": values}})

    @classmethod
    def parse(cls, data: Any) -> Factors | None:
        """Factors from JSON (or already read); ``None`` where there are none (not a JSON object)."""
        if isinstance(data, Factors) or data is None:
            return data
        return cls(data) if isinstance(data, dict) else None

    def _entry(self, name: str) -> dict[str, Any] | None:
        entry = self.raw.get(name)
        return entry if isinstance(entry, dict) and "values" in entry else None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(str(n) for n in self.raw if self._entry(n) is not None)

    def values(self, name: str) -> dict[str, Any] | None:
        entry = self._entry(name)
        if entry is None:
            return None
        return entry["values"] if isinstance(entry["values"], dict) else {"value": entry["values"]}

    def hash_of(self, name: str) -> str | None:
        entry = self._entry(name)
        h = entry.get("hash") if entry is not None else None
        return h if isinstance(h, str) else None

    def to_json(self) -> dict[str, Any]:
        return self.raw

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Factors) and self.raw == other.raw

    def __hash__(self) -> int:
        return hash(json.dumps(self.raw, sort_keys=True, default=repr))

    def __repr__(self) -> str:
        return f"Factors({', '.join(self.names) or 'raw'})"


@dataclasses.dataclass(frozen=True)
class Difference:
    category: str  # "env" | "config" | "code" | "compiler" | "fingerprint" | "factors" | "keys"
    name: str  # the variable, dotted config field, traced file id, compiler key or fingerprint field
    a: Any
    b: Any
    cache: str = ""  # "hashA vs hashB" when several caches are compared

    def line(self) -> str:
        where = f" [{self.cache}]" if self.cache else ""
        if self.category == "code":
            if self.a == UNSET:
                return f"code: traced file {self.name!r} only in B{where}"
            if self.b == UNSET:
                return f"code: traced file {self.name!r} only in A{where}"
            return f"code: traced file {self.name!r} differs ({str(self.a)[:12]} vs {str(self.b)[:12]}){where}"
        return f"{self.category}: {self.name}: {_fmt(self.a)} vs {_fmt(self.b)}{where}"

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def _fmt(v: Any) -> str:
    return v if v == UNSET else short_repr(v, 80)
