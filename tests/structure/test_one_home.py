"""One home for each choice: a rule that two places had their own copy of lives in one."""

from __future__ import annotations

import ast

from tests.structure.modules import nodes


def test_one_comparison_of_factor_values():
    """compiler.cache_key.field_differences is the one field-by-field comparison and compiler.key_prediction's
    compiler_factors_for the one "recorded evidence, else exact values" rule (key_prediction and the install
    preflight each had their own sentinel, diff helper and cheap-else-exact code)."""
    from cachetool.layouts.factors import UNSET
    from compiler.cache_key import UNSET as COMPILER_UNSET

    assert UNSET == COMPILER_UNSET  # the two packages' one sentinel each, the same text (cachetool reads both)
    bad = []
    for rel, node in nodes(("compiler/cache_key.py", "cachetool/layouts/factors.py")):
        if isinstance(node, ast.Constant) and node.value == "<unset>":
            bad.append(f"{rel}:{node.lineno} its own <unset> sentinel")
        called = getattr(node.func, "attr", getattr(node.func, "id", None)) if isinstance(node, ast.Call) else None
        if called == "cheap_compiler_factors" and rel != "compiler/key_prediction.py":
            bad.append(f"{rel}:{node.lineno} cheap_compiler_factors outside compiler_factors_for")
    assert bad == []
