"""The project's modules read as source, for the structure rules (tests/structure/): where each module is, what it
imports, and its syntax nodes."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cachetool", "compiler")


def modules() -> dict[str, Path]:
    """{dotted name: path} of every module of both packages."""
    out = {}
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def imports(mod: str, path: Path):
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


def runs_in_the_engines_interpreter() -> tuple[str, ...]:
    """The modules of cachetool/engines/ that import neither package: an engine runs them in its own interpreter
    (vLLM's child and the probe inside its workers, a probe inside a user's program), where they read Dynamo's
    counters and hooks, the one place a private torch name is read outside torch_compat (docs/vllm.md)."""
    out = []
    for mod, path in modules().items():
        if (
            mod.startswith("cachetool.engines.")
            and path.name != "__init__.py"
            and not any(True for _ in imports(mod, path))
        ):
            out.append(str(path.relative_to(ROOT)))
    return tuple(out)


def nodes(allowed: tuple[str, ...]):
    """(path relative to the repository, node) for every syntax node of every module but those under ``allowed``."""
    for path in modules().values():
        rel = str(path.relative_to(ROOT))
        if not rel.startswith(allowed):
            for node in ast.walk(ast.parse(path.read_text())):
                yield rel, node
