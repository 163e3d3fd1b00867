"""Packages: every folder of Python modules is a package whose ``__init__`` declares ``__all__``, and what a module
takes from a package is in that list."""

from __future__ import annotations

import ast

from tests.structure.modules import PACKAGES, ROOT

FOLDERS = {  # every package of both: its folder
    ".".join(init.parent.relative_to(ROOT).parts): init.parent
    for top in PACKAGES
    for init in sorted((ROOT / top).rglob("__init__.py"))
}


def _submodule(package: str, name: str) -> bool:
    folder = FOLDERS[package]
    return (folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file()


def test_every_package_is_one_with_its_public_names():
    """Every folder of Python modules is a package (compiler/models was a namespace package, with no place to say
    what it offers) whose ``__init__`` declares ``__all__``, and each name in it resolves (a name or a submodule)."""
    import importlib

    folders = {p.parent for top in PACKAGES for p in (ROOT / top).rglob("*.py")}
    assert sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").is_file()) == []
    undeclared, unresolved = [], []
    for package, folder in FOLDERS.items():
        tree = ast.parse((folder / "__init__.py").read_text())
        targets = [
            t
            for n in tree.body
            if isinstance(n, (ast.Assign, ast.AnnAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        ]
        if not any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            undeclared.append(package)
            continue
        module = importlib.import_module(package)
        unresolved += [f"{package}.{n}" for n in module.__all__ if not (hasattr(module, n) or _submodule(package, n))]
    assert undeclared == [] and unresolved == []


def test_what_a_module_takes_from_a_package_is_in_its_public_list():
    """``from compiler.torch_compat import X``, ``torch_compat.X`` and the like, anywhere in cachetool/ and
    compiler/: X is in that package's ``__all__`` (or is one of its submodules)."""
    import importlib

    public = {p: set(importlib.import_module(p).__all__) for p in FOLDERS}
    outside = []
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            tree = ast.parse(path.read_text())
            names: dict[str, str] = {}  # a local name bound to a package
            taken: list[tuple[str, str]] = []
            for n in ast.walk(tree):
                if isinstance(n, ast.ImportFrom) and n.module and not n.level:
                    for a in n.names:
                        if f"{n.module}.{a.name}" in FOLDERS:
                            names[a.asname or a.name] = f"{n.module}.{a.name}"
                        elif n.module in FOLDERS:
                            taken.append((n.module, a.name))
                elif isinstance(n, ast.Import):
                    names.update({a.asname: a.name for a in n.names if a.asname and a.name in FOLDERS})
            taken += [
                (names[n.value.id], n.attr)
                for n in ast.walk(tree)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in names
            ]
            rel = path.relative_to(ROOT)
            outside += [
                f"{rel}: {p}.{x}"
                for p, x in taken
                if x not in public[p] and not _submodule(p, x) and FOLDERS[p] != path.parent
            ]
    assert outside == []
