"""Field-by-field differences of two recorded factor values: the dotted leaves that differ, the fields a user sets
first. The same rules as the pipeline's own comparison (``compiler.cache_key``), which names a hot start's miss;
tests/facts/test_agreement.py checks that the two name the same fields."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from cachetool.layouts.factors import UNSET

__all__ = ["FieldDifference", "field_differences", "flatten", "most_telling_first", "same_json"]

# The fields a user sets, in the order a miss should name them: what follows from them (the all-reduce choice a
# tensor-parallel size implies, the head size a hidden size implies) is named after them.
USER_SET_FIELDS = (
    "tensor_parallel_size",
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
    "architecture",
    "dtype",
    "mode",
)


@dataclasses.dataclass(frozen=True)
class FieldDifference:
    """One field where two factors' values differ: its dotted name and each side's value (:data:`UNSET`)."""

    field: str
    a: Any
    b: Any


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a.b": leaf}`` for every leaf of nested dicts (an empty dict is a leaf of its own)."""
    if not isinstance(value, dict):
        return {prefix: value}
    out: dict[str, Any] = {prefix: {}} if not value and prefix else {}
    for k, v in value.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def same_json(a: Any, b: Any) -> bool:
    """Two recorded values are the same: equal, or the same JSON text (NaN is NaN; a value JSON cannot write is
    compared by its repr), so the comparison is total over whatever a factor file holds."""
    try:
        if a == b:
            return True
    except Exception:  # noqa: BLE001 - a value whose == raises is compared by its text below
        pass
    return json.dumps(a, sort_keys=True, default=repr) == json.dumps(b, sort_keys=True, default=repr)


def field_differences(a: Any, b: Any, *, nested: bool = True) -> list[FieldDifference]:
    """Every field where two factor values differ, sorted by name: the dotted leaves of nested dicts (``nested``),
    else their top-level keys."""
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return [] if same_json(a, b) else [FieldDifference("(all)", a, b)]
    fa, fb = (flatten(a), flatten(b)) if nested else (a, b)
    return [
        FieldDifference(str(k), fa.get(k, UNSET), fb.get(k, UNSET))
        for k in sorted(set(fa) | set(fb), key=str)
        if not same_json(fa.get(k, UNSET), fb.get(k, UNSET))
    ]


def most_telling_first(diffs: list[FieldDifference]) -> list[FieldDifference]:
    """``diffs`` with the fields a user sets (:data:`USER_SET_FIELDS`, by their last dotted part) first, in that
    order, the rest after them as they were."""

    def rank(d: FieldDifference) -> int:
        leaf = d.field.rsplit(".", 1)[-1]
        return USER_SET_FIELDS.index(leaf) if leaf in USER_SET_FIELDS else len(USER_SET_FIELDS)

    return sorted(diffs, key=rank)
