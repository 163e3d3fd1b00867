"""The engine as the one boundary (docs/ARCHITECTURE.md, "The engine boundary"): cachetool reaches compiler only
through the doors ARCHITECTURE lists (the same list both ways); outside cachetool/engines/ no code spells what an
engine declares, compares with an engine's name, builds an engine or imports an engine's modules; the CLI's layout
choices come from the registry the engines fill."""

from __future__ import annotations

import ast
import re

from tests.structure.modules import ROOT, imports, modules

# cachetool reaches compiler through these modules alone, all the native engine's (cachetool/engines/native/): every
# other engine, and the machine facts they share (cachetool/facts/), import no compiler; ARCHITECTURE names the list.
COMPILER_DOORS = (
    "cachetool.engines.native.start",
    "cachetool.engines.native.error_mapping",
    "cachetool.engines.native.key",
    "cachetool.engines.native.machine",
    "cachetool.engines.native.layout",
)
MAX_COMPILER_DOORS = 5


# Outside cachetool/engines/, a module reaches an engine through the registries (cachetool.engines, and beside it
# the engines' layouts, cachetool.engines.layouts) and the interface (cachetool.engines.base) only: the API asks the
# registered native engine for the helpers it alone offers (compilation_config, expected_cache_key), no exception.
ENGINE_IMPORTS_ALLOWED: dict[str, tuple[str, ...]] = {}
ENGINE_DOORS = ("cachetool.engines.base", "cachetool.engines.layouts")


def _compiler_importers() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for mod, path in modules().items():
        if mod.startswith("cachetool"):
            for line, target, _name in imports(mod, path):
                if target.split(".")[0] == "compiler":
                    out.setdefault(mod, []).append(f"{path.relative_to(ROOT)}:{line} {target}")
    return out


def test_cachetool_reaches_compiler_only_through_the_doors():
    assert all(d.startswith("cachetool.engines.native.") for d in COMPILER_DOORS)
    assert len(COMPILER_DOORS) <= MAX_COMPILER_DOORS
    assert [m for m in COMPILER_DOORS if m not in modules()] == []
    outside = [line for mod, lines in _compiler_importers().items() if mod not in COMPILER_DOORS for line in lines]
    assert outside == []


def test_the_doors_are_architectures_list():
    arch = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = arch[arch.index("### What cachetool uses of compiler") :]
    section = section[: section.index("\n#", 1)]
    named = set(re.findall(r"`(cachetool/engines/(?:native/)?[a-z_]+)\.py`", section))
    assert named == {m.replace(".", "/") for m in COMPILER_DOORS}


def _engine_names() -> set[str]:
    from cachetool.engines import ENGINES

    return set(ENGINES)


def _engine_classes() -> set[str]:
    from cachetool.engines import ENGINES

    return {type(e).__name__ for e in ENGINES.values()}


def _engine_words() -> set[str]:
    """What an engine declares of itself: its name, layout and key kinds, and its own fingerprint fields; not a
    word every engine's bundles share (a common fingerprint field such as ``torch``, the torch version)."""
    from cachetool.bundle.fingerprint import COMMON_FIELDS
    from cachetool.engines import ENGINES

    return {
        w
        for e in ENGINES.values()
        for w in (e.name, e.layout, *e.key_kinds, *e.fingerprint_fields, *e.recorded_fields, *e.platform_fields)
    } - set(COMMON_FIELDS)


def _docstrings(tree: ast.AST) -> set[int]:
    return {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }


def _public_lists(tree: ast.AST) -> set[int]:
    """The strings of ``__all__``: names of functions (``cpu_isa``, the reader), not an engine's field."""
    return {
        id(c)
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)
        for c in ast.walk(n.value)
        if isinstance(c, ast.Constant)
    }


def test_no_code_outside_the_engines_spells_what_an_engine_declares():
    """bundle/manifest.py listed ("native", "vllm", "triton") and ENGINE_VERSIONS = ("vllm",), bundle/fingerprint.py
    the vLLM fields, diff.py a vLLM key kind, the CLI vLLM's factor names: each a place a new engine had to be
    added. Outside cachetool/engines/ no code (docstrings aside) spells an engine's name, layout, key kind or
    fingerprint field; it reads them from the registry."""
    words = _engine_words()
    bad = []
    for mod, path in modules().items():
        if not mod.startswith("cachetool") or mod.startswith("cachetool.engines"):
            continue
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree) | _public_lists(tree)
        bad += [
            f"{path.relative_to(ROOT)}:{n.lineno} {n.value!r}"
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and n.value in words and id(n) not in docs
        ]
    assert bad == []


def _names_an_engine(node: ast.AST, names: set[str]) -> bool:
    """A comparison with an engine's name (``== "vllm"``, ``in ("native", ...)``)."""
    if not isinstance(node, ast.Compare):
        return False
    for side in (node.left, *node.comparators):
        items = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
        if any(isinstance(i, ast.Constant) and i.value in names for i in items):
            return True
    return False


def test_no_code_outside_the_engines_names_an_engine_or_builds_one():
    """Outside cachetool/engines/ nothing compares with an engine's name, calls an engine class, or imports an
    engine's modules (only the registries and the interface): adding an engine touches cachetool/engines/ alone."""
    names, classes = _engine_names(), _engine_classes()
    bad = []
    for mod, path in modules().items():
        if not mod.startswith("cachetool") or mod.startswith("cachetool.engines"):
            continue
        rel = path.relative_to(ROOT)
        for node in ast.walk(ast.parse(path.read_text())):
            if _names_an_engine(node, names):
                bad.append(f"{rel}:{node.lineno} compares with an engine's name")
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in classes:
                bad.append(f"{rel}:{node.lineno} builds an engine")
        for line, target, _name in imports(mod, path):
            if (
                target.startswith("cachetool.engines.")
                and target not in ENGINE_DOORS
                and target not in ENGINE_IMPORTS_ALLOWED.get(mod, ())
            ):
                bad.append(f"{rel}:{line} imports {target}")
    assert bad == []


def test_the_engine_rule_catches_what_it_names():
    names = {"native", "vllm"}
    for src in ('engine == "native"', 'x.name != "vllm"', 'layout in ("vllm", "triton")'):
        assert _names_an_engine(ast.parse(src, mode="eval").body, names), src
    for src in ('layout == "triton"', "engine == default"):
        assert not _names_an_engine(ast.parse(src, mode="eval").body, names), src


def test_the_cli_layout_choices_come_from_the_registry():
    import click

    from cachetool import engines
    from cachetool.cli import bundle_cmds, cli, store_cmds  # noqa: F401  (the modules register the commands)
    from cachetool.engines.layouts import CHOICES, LAYOUTS

    # every engine's declared layout, and the one no engine writes
    assert tuple(LAYOUTS) == (*(e.layout for e in engines.ENGINES.values()), "triton")
    assert CHOICES == ("auto", *LAYOUTS)
    for name in ("pack", "push"):
        [opt] = [p for p in cli.commands[name].params if p.name == "layout"]
        assert isinstance(opt.type, click.Choice) and tuple(opt.type.choices) == CHOICES
