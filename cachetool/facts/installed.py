"""What is installed, read from files on ``sys.path`` without importing it: a module's file, a file's literal
assignments, torch's build (``torch/version.py``) and Triton's version (its distribution's metadata)."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
import os
from pathlib import Path
from typing import Any

__all__ = ["dist_version", "literal_assignments", "module_file", "torch_build", "triton_version"]

TRITON_DISTRIBUTIONS = ("triton", "pytorch-triton")  # the name pip's and torch's index give it


def module_file(name: str) -> Path | None:
    """The source file of module ``name`` (``a.b.c`` → ``a/b/c.py`` or ``a/b/c/__init__.py``), found without
    importing anything: only the top-level package's finder is asked. ``None`` if no plain file is found."""
    top, *rest = name.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest:
        return Path(spec.origin) if spec.origin and os.path.isfile(spec.origin) else None
    for location in spec.submodule_search_locations or ():
        base = Path(location).joinpath(*rest)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def literal_assignments(path: Path) -> dict[str, Any]:
    """The module-level ``NAME = <literal>`` assignments of a Python file, read without running it."""
    values: dict[str, Any] = {}
    for node in ast.parse(path.read_text()).body:
        targets: list[str] = []
        value = None
        if isinstance(node, ast.Assign):  # also ``a = b = 1`` (vllm/_version.py writes its version so)
            targets, value = [t.id for t in node.targets if isinstance(t, ast.Name)], node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            targets, value = [node.target.id], node.value
        if targets:
            try:
                literal = ast.literal_eval(value)  # type: ignore[arg-type]  # baseline (issue 46)
            except ValueError:
                continue
            values.update(dict.fromkeys(targets, literal))
    return values


@functools.lru_cache(maxsize=1)
def torch_build() -> dict[str, Any]:
    """``{"torch", "torch_git", "cuda"}`` as ``torch.__version__`` and ``torch.version`` give them, read from
    ``torch/version.py``; empty without torch."""
    path = module_file("torch.version")
    values = literal_assignments(path) if path is not None else {}
    if "__version__" not in values:
        return {}
    return {"torch": values["__version__"], "torch_git": values.get("git_version"), "cuda": values.get("cuda")}


def dist_version(name: str) -> str | None:
    """The installed version of distribution ``name``, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def triton_version() -> str | None:
    return next((v for v in map(dist_version, TRITON_DISTRIBUTIONS) if v is not None), None)
