"""The structure the code promises (docs/ARCHITECTURE.md): no module imports another's underscore names, no import
cycle, no module of cachetool imports a room after its own (ROOMS, the lowest first), no function in cachetool/ of 80
lines or more, every environment variable registered and documented, the CLI's layout choices from the registry,
cachetool's use of compiler only through the native engine and the public modules ARCHITECTURE lists (the same list
both ways), exceptions told apart by type and never by message text, compiler errors mapped to cachetool's in one
place by kind, no name used that nothing binds, no backslash line continuation (cachetool/, compiler/, benchmarks/,
scripts/*.py)."""

from __future__ import annotations

import ast
import re
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cachetool", "compiler")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _imports(mod: str, path: Path):
    """(line, imported module, imported name or None) of every import of a project module, at any depth."""
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in PACKAGES:
                    yield node.lineno, a.name, None
        elif isinstance(node, ast.ImportFrom):
            target = node.module
            if node.level:
                base = mod.split(".")[: len(mod.split(".")) - (node.level - (1 if is_pkg else 0))]
                target = ".".join(base + ([node.module] if node.module else []))
            if target and target.split(".")[0] in PACKAGES:
                for a in node.names:
                    yield node.lineno, target, a.name


def test_no_module_imports_an_underscore_name_of_another():
    bad = []
    for mod, path in _modules().items():
        for line, target, name in _imports(mod, path):
            if any(_private(part) for part in target.split(".")) or (name and _private(name)):
                bad.append(f"{path.relative_to(ROOT)}:{line} {target} {name or ''}")
    assert bad == []


def test_no_import_cycle():
    mods = _modules()
    edges = {m: set() for m in mods}
    for mod, path in mods.items():
        for _, target, name in _imports(mod, path):
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
                cycles.append(stack[stack.index(d):] + [d])
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
    foreign = set(_runs_in_the_engines_interpreter())
    bad = [f"{path.relative_to(ROOT)}:{line}" for mod, path in _modules().items()
           if mod.startswith("cachetool") and str(path.relative_to(ROOT)) not in foreign
           for line in _loads_by_name(ast.parse(path.read_text()))]
    assert bad == []


def test_the_by_name_rule_catches_what_it_names():
    src = ('importlib.import_module(MODULES[name])\nimport_module("cachetool.api")\n__import__(f"compiler.{x}")\n'
           'importlib.util.spec_from_file_location("x", path)\n'
           'importlib.import_module("torch._inductor.config")\nimportlib.metadata.version("torch")\n')
    assert _loads_by_name(ast.parse(src)) == [1, 2, 3, 4]


def _imports_at_import_time(mod: str, path: Path) -> set[str]:
    """The project modules ``mod`` imports while it is itself being imported: its statements outside functions
    (a function's imports run when it is called) and outside ``if TYPE_CHECKING:`` (never run)."""
    mods = _modules()
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
    return {mod: _imports_at_import_time(mod, path) for mod, path in _modules().items()}


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
    edges = {"cachetool.layouts": {"cachetool.engines"}, "cachetool.engines": {"cachetool.engines.native"},
             "cachetool.engines.native": {"cachetool.engines.native.layout"},
             "cachetool.engines.native.layout": {"cachetool.layouts", "cachetool.layouts.base"},
             "cachetool.layouts.base": {"cachetool.layouts"}}
    assert _cycles_through_a_package(edges) != []
    edges["cachetool.layouts"] = set()  # the registry in a module of its own: the package imports nothing
    assert _cycles_through_a_package(edges) == []


def test_no_function_in_cachetool_reaches_80_lines():
    long = []
    for p in sorted((ROOT / "cachetool").rglob("*.py")):
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 >= 80:
                long.append(f"{p.relative_to(ROOT)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)")
    assert long == []


def test_every_environment_variable_is_registered_and_in_the_readme():
    import cachetool.envs
    from cachetool import engines
    from compiler import envs

    declared = [v for e in engines.ENGINES.values() for v in e.variables]  # an engine's own, beside the registry
    assert [v.name for v in declared if v.name in {w.name for w in cachetool.envs.VARIABLES}] == []
    assert all(isinstance(v, cachetool.envs.EnvVar) for v in declared)
    ours = {v.name: v for v in (*cachetool.envs.VARIABLES, *declared)}
    theirs = {v.name: v for v in envs.VARIABLES.values()}
    # a variable both packages read (the native cache root, the logging level) has one default
    assert [n for n in set(ours) & set(theirs) if ours[n].default != theirs[n].default] == []
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Configuration reference"):readme.index("### Exit codes")]
    assert [n for n in {**ours, **theirs} if f"`{n}`" not in table] == []
    assert not any(v.name.startswith(("CACHETOOL_STORE", "CACHETOOL_TRUSTED", "AWS_", "DOCKER"))
                   for v in envs.COMPILER_VARIABLES)  # the stores' and trust's variables are cachetool's
    read_outside = []
    for mod, path in _modules().items():
        if mod in ("compiler.envs", "cachetool.envs"):
            continue
        for m in re.finditer(r"os\.environ\.get\(|os\.getenv\(|os\.environ\[[^\]]+\](?!\s*=)|in os\.environ",
                             path.read_text()):
            read_outside.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    # compiler/layout.py saves and restores the two Inductor/Triton cache variables around a compile (its own
    # write, not a setting read); that module belongs to the pipeline and is left as it is.
    assert [r for r in read_outside if not r.startswith("compiler/layout.py")] == []


def test_the_cli_layout_choices_come_from_the_registry():
    import click

    from cachetool.cli import bundle_cmds, cli, store_cmds  # noqa: F401  (the modules register the commands)
    from cachetool import engines
    from cachetool.engines.layouts import CHOICES, LAYOUTS

    # every engine's declared layout, and the one no engine writes
    assert tuple(LAYOUTS) == (*(e.layout for e in engines.ENGINES.values()), "triton")
    assert CHOICES == ("auto", *LAYOUTS)
    for name in ("pack", "push"):
        [opt] = [p for p in cli.commands[name].params if p.name == "layout"]
        assert isinstance(opt.type, click.Choice) and tuple(opt.type.choices) == CHOICES


def test_no_module_reaches_500_lines():
    long = [f"{p.relative_to(ROOT)} ({n} lines)" for p in _modules().values()
            if (n := len(p.read_text().splitlines())) > 500]
    assert long == []


# The engine as the one boundary (docs/ARCHITECTURE.md, "The engine boundary"). cachetool reaches compiler
# through these modules alone: the native engine's (under cachetool/engines/native/) and the two every engine reads
# (this machine's facts and the one comparison of recorded factors, directly under cachetool/engines/);
# ARCHITECTURE names the same list.
COMPILER_DOORS = ("cachetool.engines.native.run", "cachetool.engines.native.error_mapping",
                  "cachetool.engines.native.keys", "cachetool.engines.native.machine",
                  "cachetool.engines.native.layout", "cachetool.engines.machine", "cachetool.engines.factor_compare")
ENGINE_NEUTRAL_DOORS = ("cachetool.engines.machine", "cachetool.engines.factor_compare")
# Outside cachetool/engines/, a module reaches an engine through the registries (cachetool.engines, and beside it
# the engines' layouts, cachetool.engines.layouts) and the interface (cachetool.engines.base) only; the API
# re-exports the native engine's two public helpers, which have been cachetool's API since its first release
# (compilation_config, expected_cache_key).
ENGINE_IMPORTS_ALLOWED = {"cachetool.api": ("cachetool.engines.native.run", "cachetool.engines.native.keys")}
ENGINE_DOORS = ("cachetool.engines.base", "cachetool.engines.layouts")


def _compiler_importers() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for mod, path in _modules().items():
        if mod.startswith("cachetool"):
            for line, target, _name in _imports(mod, path):
                if target.split(".")[0] == "compiler":
                    out.setdefault(mod, []).append(f"{path.relative_to(ROOT)}:{line} {target}")
    return out


def test_cachetool_reaches_compiler_only_through_the_doors():
    assert all(d.startswith("cachetool.engines.native.") or d in ENGINE_NEUTRAL_DOORS for d in COMPILER_DOORS)
    assert [m for m in COMPILER_DOORS if m not in _modules()] == []
    outside = [line for mod, lines in _compiler_importers().items() if mod not in COMPILER_DOORS for line in lines]
    assert outside == []


def test_the_doors_are_architectures_list():
    arch = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = arch[arch.index("### What cachetool uses of compiler"):]
    section = section[:section.index("\n#", 1)]
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

    return {w for e in ENGINES.values() for w in (e.name, e.layout, *e.key_kinds, *e.fingerprint_fields,
                                                   *e.recorded_fields, *e.platform_fields)} - set(COMMON_FIELDS)


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}


def test_no_code_outside_the_engines_spells_what_an_engine_declares():
    """bundle/manifest.py listed ("native", "vllm", "triton") and ENGINE_VERSIONS = ("vllm",), bundle/fingerprint.py
    the vLLM fields, diff.py a vLLM key kind, the CLI vLLM's factor names: each a place a new engine had to be
    added. Outside cachetool/engines/ no code (docstrings aside) spells an engine's name, layout, key kind or
    fingerprint field; it reads them from the registry."""
    words = _engine_words()
    bad = []
    for mod, path in _modules().items():
        if not mod.startswith("cachetool") or mod.startswith("cachetool.engines"):
            continue
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        bad += [f"{path.relative_to(ROOT)}:{n.lineno} {n.value!r}" for n in ast.walk(tree)
                if isinstance(n, ast.Constant) and n.value in words and id(n) not in docs]
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
    for mod, path in _modules().items():
        if not mod.startswith("cachetool") or mod.startswith("cachetool.engines"):
            continue
        rel = path.relative_to(ROOT)
        for node in ast.walk(ast.parse(path.read_text())):
            if _names_an_engine(node, names):
                bad.append(f"{rel}:{node.lineno} compares with an engine's name")
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in classes:
                bad.append(f"{rel}:{node.lineno} builds an engine")
        for line, target, _name in _imports(mod, path):
            if (target.startswith("cachetool.engines.") and target not in ENGINE_DOORS
                    and target not in ENGINE_IMPORTS_ALLOWED.get(mod, ())):
                bad.append(f"{rel}:{line} imports {target}")
    assert bad == []


def test_the_engine_rule_catches_what_it_names():
    names = {"native", "vllm"}
    for src in ('engine == "native"', 'x.name != "vllm"', 'layout in ("vllm", "triton")'):
        assert _names_an_engine(ast.parse(src, mode="eval").body, names), src
    for src in ('layout == "triton"', 'engine == default'):
        assert not _names_an_engine(ast.parse(src, mode="eval").body, names), src


# The rooms of cachetool, the lowest first (docs/ARCHITECTURE.md, "The rooms"): a module imports modules of its own
# room and of rooms before it, never one after it; at any depth (a function's lazy import, ``if TYPE_CHECKING:``),
# since an import inside a function is still a call back up when it runs. So every call path, a pull's from the CLI
# down included, goes down the list: it enters each room once and never climbs back. Each name is a module or a
# package (with everything under it); ``cachetool`` is the front door's __init__ alone.
ROOMS = (
    "cachetool.version", "cachetool.exit_codes", "cachetool.errors", "cachetool.envs", "cachetool.digests",
    "cachetool.atomic", "cachetool.bounds", "cachetool.retry", "cachetool.process_tree", "cachetool.stop_signals",
    "cachetool.cache_root",  # the root's on-disk names: the layouts, engines, installer and transfers use them
    "cachetool.writable_root",  # a CacheRoot probed for writing
    "cachetool.layouts",     # what a cache folder holds (entries, factors) and the scan every layout shares
    "cachetool.engines",     # the compilers, each declaring its layout, key kinds, fingerprint fields; the registries
    "cachetool.bundle",      # the manifest, fingerprint, packing, .ctb, signing: read what the engines declare
    "cachetool.stores",      # where bundles live
    "cachetool.refs",        # a ref opened, its entry for this machine chosen; ls, rm, gc
    "cachetool.install",     # a bundle source installed into a root
    "cachetool.transfer",    # push, pull (and its policy), reading a ref's bundle
    "cachetool.diff", "cachetool.prune", "cachetool.results",
    "cachetool.api",         # every verb
    "cachetool.cli", "cachetool.__main__", "cachetool",
)


def _room_of(mod: str) -> int | None:
    """The index in :data:`ROOMS` of ``mod``'s room: the longest name that is ``mod`` or a package above it."""
    rooms = [i for i, r in enumerate(ROOMS) if mod == r or (r != "cachetool" and mod.startswith(r + "."))]
    return max(rooms, key=lambda i: len(ROOMS[i]), default=None)


def _climbs_back(imports: dict[str, list[tuple[str, str]]]) -> list[str]:
    """``where: room -> room above it`` for each import (``{module: [(where, imported module)]}``) of a room after
    the importer's."""
    back = []
    for mod, targets in imports.items():
        here = _room_of(mod)
        for where, target in targets:
            there = _room_of(target)
            if here is not None and there is not None and there > here:
                back.append(f"{where} {ROOMS[here]} -> {ROOMS[there]}")
    return list(dict.fromkeys(back))  # once per line (an import of three names is one climb)


def _cachetool_imports() -> dict[str, list[tuple[str, str]]]:
    mods = _modules()
    out: dict[str, list[tuple[str, str]]] = {}
    for mod, path in mods.items():
        if mod.split(".")[0] == "cachetool":
            out[mod] = [(f"{path.relative_to(ROOT)}:{line}", f"{target}.{name}" if f"{target}.{name}" in mods
                         else target) for line, target, name in _imports(mod, path)]
    return out


def test_every_module_of_cachetool_has_a_room():
    assert [m for m in _modules() if m.split(".")[0] == "cachetool" and _room_of(m) is None] == []


def test_no_module_imports_a_room_above_its_own():
    """bundle/ read stores/ and transfer/ (reading a ref's bundle, the entry choice), stores/ read transfer/ (rm's
    open_ref), layouts/ the engines (the layout registry), the engines bundle/ (the entries and factors a cache
    folder holds), cache_root.py the engines: a pull walked from pull_with_policy climbed back up six times."""
    assert _climbs_back(_cachetool_imports()) == []


def test_the_rooms_are_architectures_list():
    arch = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = arch[arch.index("## The rooms, bottom up"):]
    section = section[:section.index("\n#", 1)]
    listed = section[section.index("`version`"):section.index("the front door")]
    assert ["cachetool." + name for name in re.findall(r"`(\w+)`", listed)] + ["cachetool"] == list(ROOMS)


def test_the_room_rule_catches_a_climb_back():
    imports = {"cachetool.bundle.reading": [("reading.py:55", "cachetool.transfer.pull")],
               "cachetool.transfer.pull": [("pull.py:9", "cachetool.bundle.source"), ("pull.py:10", "cachetool")],
               "cachetool": [("__init__.py:31", "cachetool.api")]}
    assert _climbs_back(imports) == ["reading.py:55 cachetool.bundle -> cachetool.transfer",
                                     "pull.py:10 cachetool.transfer -> cachetool"]
    assert _room_of("cachetool.engines.vllm.child") == ROOMS.index("cachetool.engines")
    assert _room_of("cachetool.bundles") is None  # a room's name is a whole part of the dotted name


# The pull path, top-down: each room calls only rooms after it (the policy runs the pull; it does not call back
# into the API).
PULL_PATH = ("cachetool.cli", "cachetool.api", "cachetool.transfer.pull_policy", "cachetool.transfer.pull", "cachetool.install")


def _room(mod: str) -> int | None:
    return next((i for i, r in enumerate(PULL_PATH) if mod == r or mod.startswith(r + ".")), None)


def test_the_pull_path_reads_top_down():
    back = []
    for mod, path in _modules().items():
        here = _room(mod)
        if here is None:
            continue
        for line, target, name in _imports(mod, path):
            full = f"{target}.{name}" if name else target
            there = _room(full)
            if there is not None and there < here:
                back.append(f"{path.relative_to(ROOT)}:{line} {PULL_PATH[here]} -> {PULL_PATH[there]}")
    assert back == []


def _runs_in_the_engines_interpreter() -> tuple[str, ...]:
    """The modules of cachetool/engines/ that import neither package: an engine runs them in its own interpreter
    (vLLM's child and the probe inside its workers, a probe inside a user's program), where they read Dynamo's
    counters and hooks, the one place a private torch name is read outside torch_compat (docs/vllm.md)."""
    out = []
    for mod, path in _modules().items():
        if mod.startswith("cachetool.engines.") and path.name != "__init__.py" and not any(True for _ in
                                                                                           _imports(mod, path)):
            out.append(str(path.relative_to(ROOT)))
    return tuple(out)


PRIVATE_TORCH_ALLOWED = ("compiler/torch_compat/", *_runs_in_the_engines_interpreter())


def _nodes(allowed: tuple[str, ...]):
    """(path relative to the repository, node) for every syntax node of every module but those under ``allowed``."""
    for path in _modules().values():
        rel = str(path.relative_to(ROOT))
        if not rel.startswith(allowed):
            for node in ast.walk(ast.parse(path.read_text())):
                yield rel, node


def test_private_torch_only_in_torch_compat():
    def private(dotted: str) -> bool:
        parts = dotted.split(".")
        return parts[0] == "torch" and any(_private(p) for p in parts[1:])

    bad = []
    for rel, node in _nodes(PRIVATE_TORCH_ALLOWED):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Attribute):
            chain, n = [node.attr], node.value
            while isinstance(n, ast.Attribute):
                chain.append(n.attr)
                n = n.value
            if isinstance(n, ast.Name):
                names = [".".join([n.id, *reversed(chain)])]
        bad += [f"{rel}:{node.lineno} {x}" for x in names if private(x)]
    assert sorted(set(bad)) == []


# Where the only description of a failure is another library's text, reading it is the one way: kept to these
# functions, each with why (an entry that no longer reads text fails the test, so the list stays true).
MESSAGE_TEXT_ALLOWED = {
    "cachetool/stores/s3.py:_upload_file": "boto3's S3UploadFailedError says NoSuchBucket or the auth code only in "
                                           "its message",
    "compiler/torch_compat/__init__.py:is_recompile_refusal": "torch's recompile refusal is a plain RuntimeError "
                                                              "told apart only by its message",
}
# A parameter with one of these names, or annotated with a ...Exception / ...Error type, holds an exception.
EXCEPTION_PARAMETERS = ("exc", "err", "error", "exception", "e")
TEXT_MATCHERS = ("startswith", "endswith", "find", "rfind", "index", "search", "match", "fullmatch", "findall")


def _exception_parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    out = set()
    a = fn.args
    for p in [*a.posonlyargs, *a.args, *a.kwonlyargs, *([a.vararg] if a.vararg else [])]:
        names: set[str] = set()
        for n in ast.walk(p.annotation) if p.annotation is not None else ():
            if isinstance(n, ast.Name):
                names.add(n.id)
            elif isinstance(n, ast.Attribute):
                names.add(n.attr)
            elif isinstance(n, ast.Constant) and isinstance(n.value, str):  # a quoted annotation
                names |= set(re.findall(r"\w+", n.value))
        if p.arg in EXCEPTION_PARAMETERS or any(re.search(r"(Exception|Error)$", x) for x in names):
            out.add(p.arg)
    return out


def _message_text_matches(scope: ast.AST, excs: set[str]) -> list[int]:
    """Lines in ``scope`` that test the message text of the exceptions named ``excs``: ``in`` / ``not in``, ``==`` /
    ``!=`` against a string, or ``startswith``/``re.search``/... on ``str(exc)``, ``repr(exc)``, ``f"{exc}"``,
    ``exc.args``, ``exc.message``, ``exc.strerror``, or a name assigned from any of them. Building a message from the
    text (``raise X(str(exc))``) is not a test of it."""
    def source(n: ast.AST) -> bool:
        if isinstance(n, ast.Name):
            return n.id in texts
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("str", "repr", "format"):
            return bool(n.args) and isinstance(n.args[0], ast.Name) and n.args[0].id in excs
        if isinstance(n, ast.Attribute) and n.attr in ("args", "message", "strerror"):
            return isinstance(n.value, ast.Name) and n.value.id in excs
        if isinstance(n, ast.FormattedValue):
            return isinstance(n.value, ast.Name) and n.value.id in excs
        return False

    def text(node: ast.AST) -> bool:
        return any(source(n) for n in ast.walk(node))

    texts: set[str] = set()
    grew = True
    while grew:  # names bound to the text, or to something made of it
        grew = False
        for n in ast.walk(scope):
            if isinstance(n, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and n.value is not None and text(n.value):
                new = {t.id for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                       if isinstance(t, ast.Name)} - texts
                texts |= new
                grew = grew or bool(new)
    lines = []
    for n in ast.walk(scope):
        if isinstance(n, ast.Compare) and any(text(side) for side in (n.left, *n.comparators)):
            if any(isinstance(op, (ast.In, ast.NotIn)) for op in n.ops) or (
                    any(isinstance(op, (ast.Eq, ast.NotEq)) for op in n.ops)
                    and any(isinstance(side, ast.Constant) and isinstance(side.value, str)
                            for side in (n.left, *n.comparators))):
                lines.append(n.lineno)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in TEXT_MATCHERS \
                and (text(n.func.value) or any(text(a) for a in n.args)):
            lines.append(n.lineno)
    return lines


def _message_text_tests(tree: ast.AST) -> dict[int, str]:
    """{line: innermost enclosing function} of every message-text test in an ``except`` branch (on the name it
    binds) or in a function that receives an exception (on that parameter)."""
    found: dict[int, str] = {}

    def visit(node: ast.AST, fn: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            fn = node.name
            excs = _exception_parameters(node)
            if excs:
                found.update({line: fn for line in _message_text_matches(node, excs)})
        if isinstance(node, ast.ExceptHandler) and node.name:
            found.update({line: fn for line in _message_text_matches(node, {node.name})})
        for child in ast.iter_child_nodes(node):
            visit(child, fn)

    visit(tree, "<module>")
    return found


def test_exceptions_are_told_apart_by_type_not_message_text():
    """warmup sorted the compiler's errors by 'strict mode' in their text, the OCI store its own by theirs, and the
    OCI TLS code sorted ssl errors by theirs in a function taking the exception: an error says its kind
    (compiler/errors.py), its class (cachetool/errors.py) or its fields (``ssl``'s ``verify_code``, ``reason``)."""
    bad, used = [], set()
    for path in _modules().values():
        rel = str(path.relative_to(ROOT))
        for line, fn in sorted(_message_text_tests(ast.parse(path.read_text())).items()):
            if f"{rel}:{fn}" in MESSAGE_TEXT_ALLOWED:
                used.add(f"{rel}:{fn}")
            else:
                bad.append(f"{rel}:{line} ({fn})")
    assert bad == []
    assert sorted(set(MESSAGE_TEXT_ALLOWED) - used) == []  # an entry that reads no text any more goes


def test_the_message_text_check_finds_what_it_should():
    src = '''
def by_annotation(failure: BaseException) -> bool:
    return "certificate verify failed" in str(failure)
def by_name(exc):
    text = " ".join(str(exc).split())
    return text.startswith("WRONG_VERSION")
def by_args(err: "requests.exceptions.SSLError"):
    return err.args[0] == "x"
def by_fstring(e):
    return re.search("strict mode", f"{e}")
def in_branch():
    try:
        pass
    except RuntimeError as x:
        if "stance" in repr(x).lower():
            raise
def fine(exc: Exception, name: str):
    message = str(exc)
    if "x" in name or name == "y" or isinstance(exc, OSError):
        raise ValueError(f"{name}: {message}") from exc
    return exc.args, str(exc).splitlines()[0]
'''
    assert sorted(_message_text_tests(ast.parse(src)).values()) == ["by_annotation", "by_args", "by_fstring",
                                                                     "by_name", "in_branch"]


def test_every_compiler_error_is_a_compiler_error():
    """compiler/errors.py: an embedder maps the pipeline's errors by ``kind``; a class ending in ``Error`` in
    compiler/ that does not derive from CompilerError (ConfigError and ModelSpecError were plain ValueErrors)
    has no kind to map."""
    bases: dict[str, list[str]] = {}
    where: dict[str, str] = {}
    for rel, node in _nodes(()):
        if rel.startswith("compiler/") and isinstance(node, ast.ClassDef) and node.name.endswith("Error"):
            bases[node.name] = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
            where[node.name] = f"{rel}:{node.lineno}"

    def derives(name: str, seen: frozenset = frozenset()) -> bool:
        return name == "CompilerError" or any(b in bases and b not in seen and derives(b, seen | {name})
                                              for b in bases.get(name, []))

    assert sorted(where[n] for n in bases if not derives(n)) == []


def _compiler_error_classes() -> set[str]:
    """The names of compiler/'s classes deriving from CompilerError (``CompileInStrictMode``, ``RankFailed``, ...)."""
    bases: dict[str, list[str]] = {}
    for rel, node in _nodes(()):
        if rel.startswith("compiler/") and isinstance(node, ast.ClassDef):
            bases[node.name] = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]

    def derives(name: str, seen: frozenset = frozenset()) -> bool:
        return name == "CompilerError" or any(b in bases and b not in seen and derives(b, seen | {name})
                                              for b in bases.get(name, []))

    return {n for n in bases if derives(n)}


def _compiler_errors_caught_by_class() -> list[str]:
    """``except <a compiler error class>`` in cachetool/: each such branch turns a compiler error into cachetool's
    by its class, where ``warmup.compiler_errors_mapped`` (``warmup.KIND_TO_ERROR``) is the one place that does it,
    by kind."""
    classes = _compiler_error_classes()
    bad = []
    for rel, node in _nodes(()):
        if rel.startswith("cachetool/") and isinstance(node, ast.ExceptHandler) and node.type is not None:
            types = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
            names = [t.id if isinstance(t, ast.Name) else getattr(t, "attr", "") for t in types]
            bad += [f"{rel}:{node.lineno} except {n}" for n in names if n in classes]
    return sorted(bad)


# Branches that still map a compiler error by class, in files whose owner changes them (each: who, and why).
def test_compiler_errors_become_cachetools_in_one_place_by_kind():
    assert {"CompileInStrictMode", "ConfigError", "ModelSpecError", "RankFailed"} <= _compiler_error_classes()
    assert _compiler_errors_caught_by_class() == []


def test_one_comparison_of_factor_values():
    """compiler.cache_key.field_differences is the one field-by-field comparison and compiler.key_prediction's
    compiler_factors_for the one "recorded evidence, else exact values" rule (key_prediction and the install
    preflight each had their own sentinel, diff helper and cheap-else-exact code)."""
    from cachetool.layouts.factors import UNSET
    from compiler.cache_key import UNSET as COMPILER_UNSET

    assert UNSET == COMPILER_UNSET  # the two packages' one sentinel each, the same text (cachetool reads both)
    bad = []
    for rel, node in _nodes(("compiler/cache_key.py", "cachetool/layouts/factors.py")):
        if isinstance(node, ast.Constant) and node.value == "<unset>":
            bad.append(f"{rel}:{node.lineno} its own <unset> sentinel")
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) \
                == "cheap_compiler_factors" and rel != "compiler/key_prediction.py":
            bad.append(f"{rel}:{node.lineno} cheap_compiler_factors outside compiler_factors_for")
    assert bad == []


def test_no_module_uses_a_name_nothing_binds():
    """A name used but never imported or defined (an import removed while a use stayed) fails only when that line
    runs, which for an error path may be never in the suite: pyflakes reads every module for them."""
    from pyflakes.api import checkPath
    from pyflakes.messages import UndefinedExport, UndefinedName
    from pyflakes.reporter import Reporter

    class Undefined(Reporter):
        def __init__(self):
            self.found: list[str] = []

        def flake(self, message):
            if isinstance(message, (UndefinedName, UndefinedExport)):
                self.found.append(str(message))

        def unexpectedError(self, filename, msg):
            self.found.append(f"{filename}: {msg}")

        syntaxError = unexpectedError

    reporter = Undefined()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            checkPath(str(path), reporter)
    assert reporter.found == []


def test_the_version_is_pyprojects_and_nothing_imports_the_front_door():
    """``__version__`` has its own module (cachetool/version.py): no module of the package imports a name from
    ``cachetool/__init__.py``, whose names load the API lazily."""
    import tomllib

    from cachetool.version import __version__

    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"] == __version__
    mods = _modules()
    front = [f"{path.relative_to(ROOT)}:{line} {name}" for mod, path in mods.items() if mod.startswith("cachetool.")
             for line, target, name in _imports(mod, path)
             if target == "cachetool" and name is not None and f"cachetool.{name}" not in mods]
    assert front == []


# The cache root travels as a value (issue 37, item 3): resolved once by cachetool/cache_root.py's CacheRoot, which
# alone expands or resolves a root; the layers take the CacheRoot (its path, or .resolved). Before, the root was
# resolved once and expanded again in seven places (pull_policy, pull, the installer, the native start twice, the
# vLLM start and key check), and the default root was written in five.
ROOT_TOUCHES = ("expanduser", "resolve", "absolute")


def _root_expansions(tree: ast.AST) -> list[int]:
    """Lines that expand or resolve a cache root themselves: ``X.expanduser()``, ``X.resolve()``, ``X.absolute()``
    or ``os.path.expanduser(X)`` where X names a root (``root``, ``cache_root``, ``request.cache_root``, ...)."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        if node.func.attr in ROOT_TOUCHES:
            what = node.func.value if not (node.func.attr == "expanduser" and node.args) else node.args[0]
            if "root" in ast.unparse(what).lower():
                lines.append(node.lineno)
    return sorted(lines)


def test_nothing_but_cache_root_expands_or_resolves_a_cache_root():
    bad = [f"{path.relative_to(ROOT)}:{line}" for mod, path in _modules().items()
           if mod.startswith("cachetool.") and mod != "cachetool.cache_root"
           for line in _root_expansions(ast.parse(path.read_text()))]
    assert bad == []


def test_the_root_expansion_rule_catches_what_it_names():
    src = ("root = Path(request.cache_root).expanduser()\nx = root.resolve()\ncfg = str(Path(cache_root).absolute())\n"
           "os.path.expanduser(root_text)\np = Path(model).expanduser()\nkey = Path(entry).expanduser().resolve()\n"
           "root.path / PARTIAL_DIR\nroot.resolved\n")
    assert _root_expansions(ast.parse(src)) == [1, 2, 3, 4]


def test_the_default_cache_root_is_written_once_a_package():
    """cachetool's registry holds the native root's default (the native engine reads it there, the help texts from
    the engine); the pipeline's own registry, which must not import cachetool, holds the same value once
    (test_every_environment_variable_is_registered_and_in_the_readme checks that they agree)."""
    default = re.compile(r"~/\.cache/cachetool(?![-\w])")
    written = {str(path.relative_to(ROOT)): n for path in _modules().values()
               if (n := len(default.findall(path.read_text())))}
    assert written == {"cachetool/envs.py": 1, "compiler/envs.py": 1}


# The install's options are listed once (issue 37, item 1): cachetool/install/options.py's InstallOptions, each with
# its default, which a pull's request (transfer.pull.PullRequest) extends; the API builds one value from its keywords
# and every layer below hands it down. Before, api.install, install.install_bundle, api.pull, api.pull_outcome and
# api.pull_request each took every option with its default again (api.py's three pull functions ~21 keywords each),
# and api.pull, api.pull_outcome and transfer.pull passed every one on by name. The CLI, where flags become the
# request's keywords, names each flag once and is not a layer below. The same for a start's options in the API:
# StartRequest's defaults alone (api.warm, api.check and api.start_request each listed them, and _given again).
# (file, class, the modules that must not list its fields again)
OPTIONS = (("cachetool/install/options.py", "InstallOptions", "cachetool."),
           ("cachetool/engines/base.py", "StartRequest", "cachetool.api"))


def _fields(path: Path, cls: str) -> set[str]:
    """The annotated fields of dataclass ``cls`` in ``path``."""
    node = next(n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef) and n.name == cls)
    return {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}


def _relisted(tree: ast.AST, fields: set[str]) -> list[int]:
    """Lines of functions that take half or more of ``fields`` as parameters, and of calls that pass half or more of
    them by name: a second listing of the options (or of their defaults) instead of the one value."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            named = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
        elif isinstance(node, ast.Call):
            named = {k.arg for k in node.keywords if k.arg}
        else:
            continue
        if 2 * len(named & fields) >= len(fields):
            lines.append(node.lineno)
    return sorted(lines)


def test_the_install_and_pull_options_are_listed_once():
    bad = []
    for where, cls, scope in OPTIONS:
        fields = _fields(ROOT / where, cls)
        assert len(fields) >= 6, f"{cls}: its fields not found"
        bad += [f"{path.relative_to(ROOT)}:{line} lists {cls}'s fields again" for mod, path in _modules().items()
                if mod.startswith(scope) and not mod.startswith("cachetool.cli")
                for line in _relisted(ast.parse(path.read_text()), fields)]
    assert bad == []


def test_the_options_rule_catches_what_it_names():
    fields = _fields(ROOT / "cachetool/install/options.py", "InstallOptions")
    src = ("def pull(ref, root=None, *, trust=None, insecure_skip_verify=False, ranks=None, device=None, force=False,\n"
           "         keep_changed=False, preflight=True, warn=None, workers=None, timeout=None): ...\n"
           "install_bundle(src, root, trust=t, ranks=r, device=d, force=f, keep_changed=k)\n"
           "install_bundle(src, root, request.install_options(trust=t, device=d), key_check=k, deadline=x)\n"
           "def verified_manifest(source, *, trust=None, insecure_skip_verify=False, warn=None): ...\n"
           "def install(bundle, cache_root=None, *, key_check=None, deadline=None, **options): ...\n")
    assert _relisted(ast.parse(src), fields) == [1, 3]


# The native start builds its run configuration once (issue 37, item 3): the engine parses a start's config once
# (start_config, which the API asks before it builds the StartRequest) and turns the request into one
# engines.native.run.NativeRun, whose config is put on the cache root once; run.start checks it and dispatches tensor
# parallelism once. Before, a warm's config was parsed twice by the engine (configured_root for the API's root, then
# for the run), copied and re-rooted by the run (twice more for each tensor-parallel rank), and run.warm and run._run
# each dispatched on the size.
def _native_run_settlings(tree: ast.AST) -> dict[str, list[int]]:
    """Lines that put a config on a root (``X.cache_dir = ...``) and lines that dispatch on the tensor-parallel size
    (a comparison of ``tensor_parallel_size`` with 1)."""
    found: dict[str, list[int]] = {"roots a config": [], "dispatches tensor parallelism": []}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "cache_dir"
                                                for t in node.targets):
            found["roots a config"].append(node.lineno)
        elif (isinstance(node, ast.Compare) and "tensor_parallel_size" in ast.unparse(node.left)
              and all(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops)
              and any(isinstance(c, ast.Constant) and c.value == 1 for c in node.comparators)):
            found["dispatches tensor parallelism"].append(node.lineno)
    return found


def _config_parses(tree: ast.AST) -> list[int]:
    """Lines that parse a compilation config: calls of ``compilation_config`` or ``parse_compilation_config``."""
    return sorted(node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
                  and ast.unparse(node.func).split(".")[-1] in ("compilation_config", "parse_compilation_config"))


def test_the_native_start_settles_its_run_once():
    native = [p for mod, p in _modules().items() if mod.startswith("cachetool.engines.native")]
    counts = {what: sum(len(_native_run_settlings(ast.parse(p.read_text()))[what]) for p in native)
              for what in ("roots a config", "dispatches tensor parallelism")}
    assert counts == {"roots a config": 1, "dispatches tensor parallelism": 1}
    engine = ROOT / "cachetool" / "engines" / "native" / "engine.py"
    assert len(_config_parses(ast.parse(engine.read_text()))) == 1, "the engine parses a start's config once"


def test_the_native_run_rule_catches_what_it_names():
    src = ("cfg.cache_dir = str(root)\nif tensor_parallel_size != 1:\n    pass\n"
           "x = a if run.tensor_parallel_size != 1 else b\nn = tensor_parallel_size < 1\nc.cache_dir\n")
    parses = ("run.compilation_config(c, o)\ncfg = compilation_config\nparse_compilation_config()\n"
              "run.config_on_root(c, r)\n")
    assert _config_parses(ast.parse(parses)) == [1, 3]
    found = _native_run_settlings(ast.parse(src))
    assert {what: sorted(lines) for what, lines in found.items()} == {"roots a config": [1],
                                                                      "dispatches tensor parallelism": [2, 4]}


CONTINUATION_TREES = ("cachetool", "compiler", "benchmarks")  # and scripts/*.py


def _backslash_continuations(source: str) -> list[int]:
    """Lines that end in a backslash continuing the statement (one in a string or a comment continues nothing)."""
    import io
    import tokenize

    lines = source.splitlines()
    skip = (tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING, tokenize.ENDMARKER)
    found, prev = [], None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in skip:
            continue
        # tokenize emits no NL for a backslash-newline: the next token starts on a later line with none between
        if (prev is not None and prev.type not in (tokenize.NEWLINE, tokenize.NL) and tok.start[0] > prev.end[0]
                and lines[prev.end[0] - 1].rstrip().endswith("\\")):
            found.append(prev.end[0])
        prev = tok
    return found


def test_no_backslash_continuations():
    """A statement continues in parentheses, never after a backslash (a space after it breaks the code)."""
    files = [p for tree in CONTINUATION_TREES for p in sorted((ROOT / tree).rglob("*.py"))]
    files += sorted((ROOT / "scripts").glob("*.py"))
    bad = [f"{p.relative_to(ROOT)}:{line}" for p in files for line in _backslash_continuations(p.read_text())]
    assert bad == []


def test_the_continuation_rule_catches_what_it_names():
    src = ('x = 1 + \\\n    2\nif (a and\n        b):\n    y = "a \\\\"  # a comment \\\n'
           's = """one \\\ntwo"""\nwith open(a) as f, \\\n        open(b) as g:\n    pass\n'
           'z = f"{x}" \\\n    f"{y}"\n')
    assert _backslash_continuations(src) == [1, 8, 11]
