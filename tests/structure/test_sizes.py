"""Sizes: no function in cachetool/ over 60 lines, no module of either package over 500 lines (the house's
rules; lines as ruff format writes them)."""

from __future__ import annotations

import ast

from tests.structure.modules import ROOT, modules


def test_no_function_in_cachetool_is_over_60_lines():
    long = []
    for p in sorted((ROOT / "cachetool").rglob("*.py")):
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 60:
                long.append(f"{p.relative_to(ROOT)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)")
    assert long == []


def test_no_module_reaches_500_lines():
    long = [
        f"{p.relative_to(ROOT)} ({n} lines)" for p in modules().values() if (n := len(p.read_text().splitlines())) > 500
    ]
    assert long == []
