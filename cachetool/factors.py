"""Comparing hash factors: two caches' factors (or a cache's and this machine's) told apart, factor by factor, as
typed :class:`Difference` rows. Used by ``diff`` (every difference), the install preflight (the first one, in its
refusal) and the vLLM engine's key check. The field-by-field comparison itself is the compiler's
(:func:`compiler.cache_key.field_differences`), which the hot start's miss reason also uses."""

from __future__ import annotations

import dataclasses
from typing import Any

from compiler.cache_key import FACTOR_NAMES as FACTORS  # the one list: the order the key hashes them in
from compiler.cache_key import UNSET, field_differences, flatten, short_repr  # noqa: F401 - re-exported


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

        return [Difference("factors", d.field, d.a, d.b, cache) for d in field_differences(raw(fa), raw(fb))]
    for name in only:
        ha, va = factor_entry(fa, name)
        hb, vb = factor_entry(fb, name)
        if va is None and vb is None:
            continue
        if ha is not None and ha == hb:
            continue
        # config fields are named by their dotted path; the other factors' values by their top-level key
        fields = field_differences(va or {}, vb or {}, nested=name == "config")
        out += [Difference(name, d.field, d.a, d.b, cache) for d in fields]
        if not fields and ha != hb:
            out.append(Difference(name, "<hash>", ha, hb, cache))
    return out
