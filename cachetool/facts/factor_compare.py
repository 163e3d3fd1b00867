"""How two keys' recorded factors differ: the one comparison through which every engine compares the factors its
key folders record (the install preflight's refusals, ``diff``, a check's miss reason), on cachetool's
engine-neutral :class:`cachetool.layouts.factors.Factors`."""

from __future__ import annotations

from cachetool import bounds
from cachetool.errors import PreflightError
from cachetool.facts.field_diff import FieldDifference, field_differences, most_telling_first, same_json
from cachetool.layouts.factors import Difference, Factors

__all__ = ["FACTOR_NAMES", "compare_factors", "compare_keys", "field_differences", "refuse_uncomputed", "same_json"]

FACTOR_NAMES = ("env", "config", "code", "compiler")  # torch.compile's four key factors, in hashing order
UNCOMPUTED = "<unknown: "  # how a value the pipeline could not compute starts (compiler.cache_key.UNKNOWN)
NESTED = ("config", "launch")  # factors whose fields are named by their dotted path


def structured(f: Factors | None) -> bool:
    """Whether ``f`` records one of the four factors in the ``{hash, values}`` shape."""
    return f is not None and any(name in f.names for name in FACTOR_NAMES)


def unwrapped(f: Factors | None) -> dict:
    """What a factor file of another shape holds, compared as it was written (``{"raw": ...}`` unwrapped)."""
    raw = f.raw if f is not None else {}
    return raw["raw"] if set(raw) == {"raw"} else raw


def compare_factors(
    fa: Factors | dict | None, fb: Factors | dict | None, *, only: tuple[str, ...] = FACTOR_NAMES, cache: str = ""
) -> list[Difference]:
    """Every field where two caches' factors differ (config fields dotted), factor by factor in ``only``'s order;
    a factor whose hashes are equal is skipped. Factors of another shape are compared field by field as they
    were written. A value that could not be computed is never a difference (:func:`refuse_uncomputed`)."""
    a, b = Factors.parse(fa), Factors.parse(fb)
    if not (structured(a) and structured(b)):
        return [
            Difference("factors", d.field, d.a, d.b, cache)
            for d in refuse_uncomputed("factors", field_differences(unwrapped(a), unwrapped(b)))
        ]
    out: list[Difference] = []
    for name in only:
        out += factor_differences(a, b, name, cache)  # type: ignore[arg-type]  # baseline (issue 46)
    return out


def factor_differences(a: Factors, b: Factors, name: str, cache: str) -> list[Difference]:
    """The differences of factor ``name``: its fields, else its hash when only the hash differs."""
    va, vb = a.values(name), b.values(name)
    if va is None and vb is None:
        return []
    ha, hb = a.hash_of(name), b.hash_of(name)
    if ha is not None and ha == hb:
        return []
    fields = refuse_uncomputed(name, most_telling_first(field_differences(va or {}, vb or {}, nested=name in NESTED)))
    out = [Difference(name, d.field, d.a, d.b, cache) for d in fields]
    return out or ([Difference(name, "<hash>", ha, hb, cache)] if ha != hb else [])


def refuse_uncomputed(name: str, fields: list[FieldDifference]) -> list[FieldDifference]:
    """``fields`` (field differences of factor ``name``), once none of them is a value that could not be computed:
    such a value is no difference, it is a question left open. Past an applied deadline that is the timeout
    (:func:`cachetool.bounds.check`); else :class:`PreflightError` naming the field."""
    for d in fields:
        value = next((v for v in (d.a, d.b) if isinstance(v, str) and v.startswith(UNCOMPUTED)), None)
        if value is not None:
            bounds.check(f"{name} factor {d.field!r}")
            cause = value.removeprefix(UNCOMPUTED).rstrip(">")
            raise PreflightError(
                f"{name} factor {d.field!r} could not be computed ({cause}): whether the two "
                "caches' values match is not known"
            )
    return fields


def compare_keys(
    a: Factors | None, b: Factors | None, *, only: tuple[str, ...] | None = None, cache: str = ""
) -> list[Difference]:
    """:func:`compare_factors` over ``only``, or over the four factors (in hashing order) then every other factor
    either side records (an engine's own: vLLM's ``inductor``, ``serve``, ``launch``): each can tell why two keys
    differ."""
    if only is None:
        extra = {n for f in (a, b) if f is not None for n in f.names} - set(FACTOR_NAMES)
        only = (*FACTOR_NAMES, *sorted(extra))
    return compare_factors(a, b, only=only, cache=cache)
