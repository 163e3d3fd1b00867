"""How two keys' recorded factors differ: the one field-by-field comparison (:func:`compiler.cache_key.
field_differences`, also the hot start's miss reason), through which every engine compares the factors its key
folders record (the install preflight's refusals, ``diff``, a check's miss reason). It works on cachetool's
engine-neutral :class:`cachetool.layouts.factors.Factors`; the compiler's types stay inside this module."""

from __future__ import annotations

from cachetool import bounds
from cachetool.errors import PreflightError
from cachetool.layouts.factors import Difference, Factors
from compiler import cache_key

__all__ = ["FACTOR_NAMES", "compare_factors", "compare_keys", "field_differences", "refuse_uncomputed", "same_json"]

FACTOR_NAMES = cache_key.FACTOR_NAMES  # the compiler's four factors, in the order its key hashes them
field_differences = cache_key.field_differences  # the one field-by-field comparison
same_json = cache_key.same_json  # the one equality of recorded values (total: NaN, lists, any JSON)
UNCOMPUTED = cache_key.UNKNOWN.partition("{")[0]  # how a value that could not be computed starts ("<unknown: ")


def _typed(f: Factors | None) -> cache_key.Factors | None:
    return cache_key.Factors.parse(f.raw) if f is not None else None


def _raw(f: cache_key.Factors | None) -> dict:
    raw = f.raw if f is not None else {}
    return raw["raw"] if set(raw) == {"raw"} else raw


def compare_factors(fa: Factors | dict | None, fb: Factors | dict | None, *, only: tuple[str, ...] = FACTOR_NAMES,
                    cache: str = "") -> list[Difference]:
    """Every field where two caches' factors differ (config fields dotted), factor by factor in ``only``'s order;
    a factor whose hashes are equal is skipped. Factors of another shape are compared field by field as they
    were written. A value that could not be computed is never a difference (:func:`refuse_uncomputed`)."""
    fa, fb = _typed(Factors.parse(fa)), _typed(Factors.parse(fb))
    if not (fa is not None and fa.structured and fb is not None and fb.structured):
        return [Difference("factors", d.field, d.a, d.b, cache)
                for d in refuse_uncomputed("factors", cache_key.field_differences(_raw(fa), _raw(fb)))]
    out: list[Difference] = []
    for name in only:
        a, b = fa.factor(name), fb.factor(name)
        if a is None and b is None:
            continue
        ha, hb = (a.hash if a else None), (b.hash if b else None)
        if ha is not None and ha == hb:
            continue
        # config fields (and a launch's env and flags) are named by their dotted path; the other factors' values
        # by their top-level key
        fields = refuse_uncomputed(name, cache_key.most_telling_first(cache_key.field_differences(
            a.values if a else {}, b.values if b else {}, nested=name in ("config", "launch"))))
        out += [Difference(name, d.field, d.a, d.b, cache) for d in fields]
        if not fields and ha != hb:
            out.append(Difference(name, "<hash>", ha, hb, cache))
    return out


def refuse_uncomputed(name: str, fields: list) -> list:
    """``fields`` (field differences of factor ``name``), once none of them is a value that could not be computed
    (:data:`compiler.cache_key.UNKNOWN`): such a value is no difference, it is a question left open. Past an applied
    deadline that is the timeout (:func:`cachetool.bounds.check`); else :class:`PreflightError` naming the field."""
    for d in fields:
        value = next((v for v in (d.a, d.b) if isinstance(v, str) and v.startswith(UNCOMPUTED)), None)
        if value is not None:
            bounds.check(f"{name} factor {d.field!r}")
            cause = value.removeprefix(UNCOMPUTED).rstrip(">")
            raise PreflightError(f"{name} factor {d.field!r} could not be computed ({cause}): whether the two "
                                 "caches' values match is not known")
    return fields


def compare_keys(a: Factors | None, b: Factors | None, *, only: tuple[str, ...] | None = None,
                 cache: str = "") -> list[Difference]:
    """:func:`compare_factors` over ``only``, or over the compiler's four factors (in hashing order) then every
    other factor either side records (an engine's own: vLLM's ``inductor``, ``serve``, ``launch``): each can tell
    why two keys differ."""
    if only is None:
        extra = {n for f in (a, b) if f is not None for n in f.names} - set(FACTOR_NAMES)
        only = (*FACTOR_NAMES, *sorted(extra))
    return compare_factors(a, b, only=only, cache=cache)
