"""Comparing hash factors: the one place where two caches' factors (or a cache's and this machine's) are told
apart, field by field. Used by ``diff`` (every difference) and by the install preflight (the first one, in its
refusal)."""

from __future__ import annotations

import dataclasses
from typing import Any

from compiler.cache_key import FACTOR_NAMES as FACTORS  # the one list: the order the key hashes them in

UNSET = "<unset>"


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


def short_repr(v: Any, limit: int = 60) -> str:
    """``repr(v)``, cut to ``limit`` characters for a one-line message."""
    s = repr(v)
    return s if len(s) <= limit else s[:limit - 3] + "..."


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        if not value and prefix:
            out[prefix] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def factor_entry(factors: dict | None, name: str) -> tuple[str | None, dict | None]:
    """``(hash, values)`` of factor ``name`` in a ``factors`` mapping, ``(None, None)`` where it has none."""
    if not isinstance(factors, dict):
        return None, None
    f = factors.get(name)
    if isinstance(f, dict) and "values" in f:
        return f.get("hash"), f["values"] if isinstance(f["values"], dict) else {"value": f["values"]}
    return None, None


def factor_values(factors: dict | None, name: str) -> dict | None:
    """The ``values`` of factor ``name`` in a ``factors`` mapping, None where it has none."""
    return factor_entry(factors, name)[1]


def compare_factors(fa: dict | None, fb: dict | None, *, only: tuple[str, ...] = FACTORS,
                    cache: str = "") -> list[Difference]:
    """Every field where two factor mappings differ (config fields dotted), factor by factor in ``only``'s order;
    a factor whose hashes are equal is skipped."""
    out: list[Difference] = []
    structured = any(factor_entry(fa, n)[1] is not None for n in FACTORS) and any(factor_entry(fb, n)[1] is not None for n in FACTORS)
    if not structured:
        # Unknown (e.g. vLLM's own) factor files: compare them field by field.
        def raw(f):
            return f["raw"] if isinstance(f, dict) and set(f) == {"raw"} else (f or {})

        a, b = flatten(raw(fa)), flatten(raw(fb))
        for k in sorted(set(a) | set(b)):
            if a.get(k, UNSET) != b.get(k, UNSET):
                out.append(Difference("factors", k, a.get(k, UNSET), b.get(k, UNSET), cache))
        return out
    for name in only:
        ha, va = factor_entry(fa, name)
        hb, vb = factor_entry(fb, name)
        if va is None and vb is None:
            continue
        if ha is not None and ha == hb:
            continue
        a = flatten(va or {}) if name in ("config",) else (va or {})
        b = flatten(vb or {}) if name in ("config",) else (vb or {})
        names = sorted(set(a) | set(b), key=str)
        found = False
        for k in names:
            if a.get(k, UNSET) != b.get(k, UNSET):
                out.append(Difference(name, str(k), a.get(k, UNSET), b.get(k, UNSET), cache))
                found = True
        if not found and ha != hb:
            out.append(Difference(name, "<hash>", ha, hb, cache))
    return out
