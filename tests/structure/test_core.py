"""The engine-agnostic core: bundle/, stores/, refs/, install/, transfer/, cache_root.py and envs.py (and the
engine-neutral facts/) import nothing of cachetool.engines or compiler, at any depth: a function's lazy import and an
``if TYPE_CHECKING:`` import count too. What the core needs of an engine it states as a protocol
(cachetool/bundle/engine_rules.py, install/key_check.py, transfer/pull_engine.py); the engines hand themselves in."""

from __future__ import annotations

import ast

from tests.structure.modules import ROOT, modules

CORE = (
    "cachetool.bundle",
    "cachetool.stores",
    "cachetool.refs",
    "cachetool.install",
    "cachetool.transfer",
    "cachetool.cache_root",
    "cachetool.envs",
    "cachetool.facts",
)
FORBIDDEN = ("cachetool.engines", "compiler")


def in_core(mod: str) -> bool:
    return any(mod == c or mod.startswith(c + ".") for c in CORE)


def imported_names(mod: str, tree: ast.AST, is_pkg: bool) -> list[tuple[int, str]]:
    """(line, dotted name) of every import at any depth; ``from cachetool import engines`` gives
    ``cachetool.engines``, a relative import its absolute name."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = mod.split(".")
                parts = parts[: len(parts) - (node.level - (1 if is_pkg else 0))]
                base = ".".join(parts + ([node.module] if node.module else []))
            out += [(node.lineno, base)] + [(node.lineno, f"{base}.{a.name}") for a in node.names]
    return out


def forbidden_imports(mod: str, source: str, is_pkg: bool = False) -> list[str]:
    found = []
    for line, name in imported_names(mod, ast.parse(source), is_pkg):
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN):
            found.append(f"{line} {name}")
    return sorted(set(found))


def test_the_core_imports_no_engine_and_no_compiler():
    bad = [
        f"{path.relative_to(ROOT)}:{hit}"
        for mod, path in modules().items()
        if in_core(mod)
        for hit in forbidden_imports(mod, path.read_text(), path.name == "__init__.py")
    ]
    assert bad == []


def test_the_rule_sees_every_kind_of_import():
    sources = (
        "from cachetool.engines.layouts import scan",
        "def f():\n    from cachetool import engines\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cachetool.engines.base import Engine\n",
        "import compiler.cache_key",
        "from compiler import build_identity",
    )
    for src in sources:
        assert forbidden_imports("cachetool.bundle.x", src), src
    assert forbidden_imports("cachetool.bundle.x", "from ..engines import base")
    assert not forbidden_imports("cachetool.bundle.x", "from cachetool.bundle import engine_rules")
