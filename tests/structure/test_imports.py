"""Imports: no module imports another's underscore names; no import cycle, also none through a package's own
module while it is half-initialised; no module of cachetool loaded by name (an import the other rules cannot see);
the version is pyproject's and no module imports the package's front door (docs/ARCHITECTURE.md, "Rules the tree
keeps")."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.structure.modules import PACKAGES, ROOT, imports, is_private, modules, runs_in_the_engines_interpreter


def test_no_module_imports_an_underscore_name_of_another():
    bad = []
    for mod, path in modules().items():
        for line, target, name in imports(mod, path):
            if any(is_private(part) for part in target.split(".")) or (name and is_private(name)):
                bad.append(f"{path.relative_to(ROOT)}:{line} {target} {name or ''}")
    assert bad == []


def test_no_import_cycle():
    mods = modules()
    edges = {m: set() for m in mods}
    for mod, path in mods.items():
        for _, target, name in imports(mod, path):
            full = f"{target}.{name}" if name else target
            dep = full if full in mods else target
            if dep in mods and dep != mod:
                edges[mod].add(dep)
    state: dict[str, int] = {}
    cycles = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in sorted(edges[m]):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d) :] + [d])
            elif d not in state:
                visit(d, stack + [d])
        state[m] = 2

    for m in sorted(mods):
        if m not in state:
            visit(m, [m])
    assert cycles == []


BY_NAME = ("import_module", "__import__", "run_module")
BY_PATH = ("spec_from_file_location", "module_from_spec", "run_path")


def _loads_by_name(tree: ast.AST) -> list[int]:
    """Lines that load a module by name (importlib, ``__import__``, runpy) where the name is not a literal outside
    the project, or by path: such a load is an import the other rules here cannot see."""
    lines = []
    for node in ast.walk(tree):
        called = getattr(node.func, "attr", getattr(node.func, "id", None)) if isinstance(node, ast.Call) else None
        if called in BY_PATH:
            lines.append(node.lineno)
        elif called in BY_NAME:
            arg = node.args[0] if node.args else None
            literal = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
            if not literal or arg.value.split(".")[0] in PACKAGES:
                lines.append(node.lineno)
    return lines


def test_no_module_of_cachetool_is_loaded_by_name():
    """layouts/__init__ loaded the engines' layout modules with importlib: an import no rule here saw, which hid a
    cycle (engines/native/layout.py imports back into that package). Every import of cachetool's is a statement,
    but in the modules an engine runs in its own interpreter (they import neither package; a probe chains the
    program's own startup modules)."""
    foreign = set(runs_in_the_engines_interpreter())
    bad = [
        f"{path.relative_to(ROOT)}:{line}"
        for mod, path in modules().items()
        if mod.startswith("cachetool") and str(path.relative_to(ROOT)) not in foreign
        for line in _loads_by_name(ast.parse(path.read_text()))
    ]
    assert bad == []


def test_the_by_name_rule_catches_what_it_names():
    src = (
        'importlib.import_module(MODULES[name])\nimport_module("cachetool.api")\n__import__(f"compiler.{x}")\n'
        'importlib.util.spec_from_file_location("x", path)\n'
        'importlib.import_module("torch._inductor.config")\nimportlib.metadata.version("torch")\n'
    )
    assert _loads_by_name(ast.parse(src)) == [1, 2, 3, 4]


def _imports_at_import_time(mod: str, path: Path) -> set[str]:
    """The project modules ``mod`` imports while it is itself being imported: its statements outside functions
    (a function's imports run when it is called) and outside ``if TYPE_CHECKING:`` (never run)."""
    mods = modules()
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            return
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = mod.split(".")[: len(mod.split(".")) - (node.level - (1 if is_pkg else 0))]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
        for t in targets:
            parts = t.split(".")
            out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))  # a.b.c runs a/ and a/b/ first
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return (out & set(mods)) - {mod}


def _run_edges() -> dict[str, set[str]]:
    """Who imports whom while being imported (:func:`_imports_at_import_time`)."""
    return {mod: _imports_at_import_time(mod, path) for mod, path in modules().items()}


def _cycles_through_a_package(edges: dict[str, set[str]]) -> list[str]:
    """Packages whose own module imports, through a module outside the package, a module of the package again: the
    package is then half-initialised while that import runs (a cycle the plain import graph does not show, since
    ``from p.x import y`` names ``p.x``, not ``p``). A package importing its own modules is its own business."""
    found = []
    for pkg in sorted(m for m in edges if (ROOT.joinpath(*m.split(".")) / "__init__.py").is_file()):
        inside = {m for m in edges if m == pkg or m.startswith(pkg + ".")}
        # the packages above it are being imported already (importing pkg ran them first): nothing runs again
        above = {".".join(pkg.split(".")[:i]) for i in range(1, len(pkg.split(".")))}
        seen, stack = set(above), [(d, [pkg, d]) for d in sorted(edges[pkg]) if d not in inside]
        while stack:
            mod, trail = stack.pop()
            if mod in seen:
                continue
            seen.add(mod)
            back = sorted(edges[mod] & inside)
            if back:
                found.append(" -> ".join([*trail, back[0]]))
                break
            stack += [(d, [*trail, d]) for d in sorted(edges[mod]) if d not in inside]
    return found


def test_no_import_cycle_runs_through_a_packages_own_module():
    """The plain import graph names ``p.x`` for ``from p.x import y``, but importing ``p.x`` runs ``p/__init__``
    first: a package whose own module imports a module outside it that imports the package again is
    half-initialised while that runs."""
    assert _cycles_through_a_package(_run_edges()) == []


def test_the_package_cycle_rule_catches_the_layouts_cycle():
    """layouts/__init__ as the registry of engine layouts, had it imported them by statement: caught."""
    edges = {
        "cachetool.layouts": {"cachetool.engines"},
        "cachetool.engines": {"cachetool.engines.native"},
        "cachetool.engines.native": {"cachetool.engines.native.layout"},
        "cachetool.engines.native.layout": {"cachetool.layouts", "cachetool.layouts.base"},
        "cachetool.layouts.base": {"cachetool.layouts"},
    }
    assert _cycles_through_a_package(edges) != []
    edges["cachetool.layouts"] = set()  # the registry in a module of its own: the package imports nothing
    assert _cycles_through_a_package(edges) == []


def test_the_version_is_pyprojects_and_nothing_imports_the_front_door():
    """``__version__`` has its own module (cachetool/version.py): no module of the package imports a name from
    ``cachetool/__init__.py``, whose names load the API lazily."""
    import tomllib

    from cachetool.version import __version__

    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"] == __version__
    mods = modules()
    front = [
        f"{path.relative_to(ROOT)}:{line} {name}"
        for mod, path in mods.items()
        if mod.startswith("cachetool.")
        for line, target, name in imports(mod, path)
        if target == "cachetool" and name is not None and f"cachetool.{name}" not in mods
    ]
    assert front == []
