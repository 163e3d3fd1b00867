"""The structure the code promises (docs/ARCHITECTURE.md): no module imports another's underscore names, no import
cycle, no function in cachetool/ of 80 lines or more, every environment variable registered and documented, the
CLI's layout choices from the registry."""

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


def test_no_function_in_cachetool_reaches_80_lines():
    long = []
    for p in sorted((ROOT / "cachetool").rglob("*.py")):
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 >= 80:
                long.append(f"{p.relative_to(ROOT)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)")
    assert long == []


def test_every_environment_variable_is_registered_and_in_the_readme():
    import cachetool.envs  # noqa: F401  (registers cachetool's variables)
    from compiler import envs

    assert {v.name for v in cachetool.envs.VARIABLES}.isdisjoint(v.name for v in envs.COMPILER_VARIABLES)
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Configuration reference"):readme.index("### Exit codes")]
    assert [n for n in envs.VARIABLES if f"`{n}`" not in table] == []
    assert not any(v.name.startswith(("CACHETOOL_STORE", "CACHETOOL_TRUSTED", "AWS_", "DOCKER"))
                   for v in envs.COMPILER_VARIABLES)  # the stores' and trust's variables are cachetool's
    read_outside = []
    for mod, path in _modules().items():
        if mod == "compiler.envs":
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
    from cachetool.layouts import CHOICES, LAYOUTS
    from cachetool.manifest import LAYOUTS as SCHEMA

    assert tuple(LAYOUTS) == SCHEMA and CHOICES == ("auto", *SCHEMA)
    for name in ("pack", "push"):
        [opt] = [p for p in cli.commands[name].params if p.name == "layout"]
        assert isinstance(opt.type, click.Choice) and tuple(opt.type.choices) == CHOICES


def test_no_module_reaches_500_lines():
    long = [f"{p.relative_to(ROOT)} ({n} lines)" for p in _modules().values()
            if (n := len(p.read_text().splitlines())) > 500]
    assert long == []


# What cachetool may import from compiler (docs/ARCHITECTURE.md, "What cachetool uses of compiler"): the engine
# that runs the pipeline may use all of it; every other module only these public modules.
NATIVE_ENGINE = ("cachetool.engines.native", "cachetool.warmup")
COMPILER_PUBLIC = ("compiler", "compiler.envs", "compiler.errors", "compiler.logger", "compiler.progress",
                   "compiler.build_identity", "compiler.config", "compiler.cache_key", "compiler.key_prediction",
                   "compiler.models.llama_config")


def test_cachetool_uses_compiler_only_through_the_engine_and_its_public_modules():
    mods = _modules()
    bad = []
    for mod, path in mods.items():
        if not mod.startswith("cachetool") or mod in NATIVE_ENGINE:
            continue
        for line, target, name in _imports(mod, path):
            full = f"{target}.{name}" if name else target
            used = full if full in mods else target
            if used.split(".")[0] == "compiler" and used not in COMPILER_PUBLIC:
                bad.append(f"{path.relative_to(ROOT)}:{line} {used}")
    assert bad == []
    arch = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    assert [m for m in COMPILER_PUBLIC[1:] if f"`{m}`" not in arch] == []


# cachetool/engines/vllm/child.py runs in vLLM's interpreter and imports neither package: it reads Dynamo's
# counters there, the one private torch name outside torch_compat (docs/vllm.md).
PRIVATE_TORCH_ALLOWED = ("compiler/torch_compat/", "cachetool/engines/vllm/child.py")


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


# Where the only description of a failure is another library's text, reading it is the one way (boto3's
# S3UploadFailedError wraps the S3 error code in its message; torch's recompile refusal is a message): kept to
# these modules.
MESSAGE_TEXT_ALLOWED = ("cachetool/stores/s3.py", "compiler/torch_compat/")


def test_no_except_branch_matches_our_exceptions_by_message_text():
    """warmup sorted the compiler's errors by 'strict mode' in their text, the OCI store its own by theirs: an
    error says its kind (compiler/errors.py) or its class (cachetool/errors.py) instead."""

    def str_of(node: ast.AST, names: set[str]) -> bool:  # str(exc)
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str"
                and bool(node.args) and isinstance(node.args[0], ast.Name) and node.args[0].id in names)

    def texts_of(handler: ast.ExceptHandler) -> set[str]:  # names bound to str(exc) in the branch
        texts: set[str] = set()
        for n in ast.walk(handler):
            if isinstance(n, ast.Assign) and any(str_of(c, {handler.name} | texts) for c in ast.walk(n.value)):
                texts |= {t.id for t in n.targets if isinstance(t, ast.Name)}
        return texts

    bad = []
    for rel, h in _nodes(MESSAGE_TEXT_ALLOWED):
        if not isinstance(h, ast.ExceptHandler) or h.name is None:
            continue
        texts = texts_of(h)

        def is_text(node: ast.AST) -> bool:
            return (isinstance(node, ast.Name) and node.id in texts) or str_of(node, {h.name} | texts)

        for n in ast.walk(h):
            if isinstance(n, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in n.ops) \
                    and any(is_text(c) for c in n.comparators):
                bad.append(f"{rel}:{n.lineno}")
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) \
                    and n.func.attr in ("startswith", "endswith", "find", "search", "match") \
                    and (is_text(n.func.value) or any(is_text(a) for a in n.args)):
                bad.append(f"{rel}:{n.lineno}")
    assert bad == []


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


def test_one_comparison_of_factor_values():
    """compiler.cache_key.field_differences is the one field-by-field comparison and compiler.key_prediction's
    compiler_factors_for the one "recorded evidence, else exact values" rule (key_prediction and the install
    preflight each had their own sentinel, diff helper and cheap-else-exact code)."""
    bad = []
    for rel, node in _nodes(("compiler/cache_key.py",)):
        if isinstance(node, ast.Constant) and node.value == "<unset>":
            bad.append(f"{rel}:{node.lineno} its own <unset> sentinel")
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) \
                == "cheap_compiler_factors" and rel != "compiler/key_prediction.py":
            bad.append(f"{rel}:{node.lineno} cheap_compiler_factors outside compiler_factors_for")
    assert bad == []
