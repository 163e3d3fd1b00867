"""Comparing hash factors: two caches' factors (or a cache's and this machine's) told apart, factor by factor, as
typed :class:`Difference` rows. Used by ``diff`` (every difference), the install preflight (the first one, in its
refusal) and the vLLM engine's key check. The field-by-field comparison itself is the compiler's
(:func:`compiler.cache_key.field_differences`), which the hot start's miss reason also uses."""

from __future__ import annotations

import dataclasses
from typing import Any

from compiler.cache_key import FACTOR_NAMES as FACTORS  # the one list: the order the key hashes them in
from compiler.cache_key import UNSET, Factors, field_differences, most_telling_first, short_repr  # noqa: F401 - re-exported


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


def compare_factors(fa: Factors | None, fb: Factors | None, *, only: tuple[str, ...] = FACTORS,
                    cache: str = "") -> list[Difference]:
    """Every field where two caches' factors differ (config fields dotted), factor by factor in ``only``'s order;
    a factor whose hashes are equal is skipped. Factors of another shape (e.g. vLLM's own) are compared field by
    field as they were written."""
    fa, fb = Factors.parse(fa), Factors.parse(fb)
    if not (fa is not None and fa.structured and fb is not None and fb.structured):
        return [Difference("factors", d.field, d.a, d.b, cache)
                for d in field_differences(_raw(fa), _raw(fb))]
    out: list[Difference] = []
    for name in only:
        a, b = fa.factor(name), fb.factor(name)
        if a is None and b is None:
            continue
        ha, hb = (a.hash if a else None), (b.hash if b else None)
        if ha is not None and ha == hb:
            continue
        # config fields (and a vLLM launch's env and flags) are named by their dotted path; the other factors'
        # values by their top-level key
        fields = most_telling_first(field_differences(a.values if a else {}, b.values if b else {},
                                                      nested=name in ("config", "launch")))
        out += [Difference(name, d.field, d.a, d.b, cache) for d in fields]
        if not fields and ha != hb:
            out.append(Difference(name, "<hash>", ha, hb, cache))
    return out


def _raw(f: Factors | None) -> dict:
    raw = f.raw if f is not None else {}
    return raw["raw"] if set(raw) == {"raw"} else raw
