"""The structure the code promises (docs/ARCHITECTURE.md): no module imports another's underscore names, no import
cycle, no function in cachetool/ of 80 lines or more, every environment variable registered and documented, the
CLI's layout choices from the registry, cachetool's use of compiler only through the native engine and the public
modules ARCHITECTURE lists (the same list both ways), exceptions told apart by type and never by message text,
compiler errors mapped to cachetool's in one place by kind, no name used that nothing binds."""

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
# that runs the pipeline may use all of it; every other module only these public modules. The list here and the
# list there are the same list (checked both ways); the package itself (``import compiler``, ``from compiler import
# <not a module>``) is not on it.
NATIVE_ENGINE = ("cachetool.engines.native", "cachetool.warmup")
COMPILER_PUBLIC = ("compiler.envs", "compiler.errors", "compiler.logger", "compiler.progress",
                   "compiler.build_identity", "compiler.config", "compiler.cache_key", "compiler.key_prediction",
                   "compiler.artifacts", "compiler.models.llama_config")


def _architecture_public_modules(arch: str) -> list[str]:
    """The modules ARCHITECTURE's list names: the backticked ``compiler...`` names outside parentheses in the
    sentence after "imports only these public modules" (the parentheses say what of each module is used)."""
    section = arch[arch.index("### What cachetool uses of compiler"):]
    text = section[section.index("imports only these public modules"):]
    names, depth, i = [], 0, 0
    while i < len(text):
        c = text[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "." and depth == 0 and (i + 1 == len(text) or text[i + 1].isspace()):
            break  # the sentence's end
        elif c == "`":
            end = text.index("`", i + 1)
            if depth == 0 and re.fullmatch(r"compiler(\.[a-z_]+)*", text[i + 1:end]):
                names.append(text[i + 1:end])
            i = end
        i += 1
    return names


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


def test_the_public_compiler_modules_are_architectures_list():
    """Both ways: a module added here is documented there, and one named there is allowed here; and each is a
    module (a renamed one fails)."""
    named = _architecture_public_modules((ROOT / "docs" / "ARCHITECTURE.md").read_text())
    assert sorted(named) == sorted(COMPILER_PUBLIC)
    assert [m for m in COMPILER_PUBLIC if m not in _modules()] == []


def test_the_architecture_list_is_read_as_written():
    """The parser of ARCHITECTURE's list, on a sentence with the same shape: nested parentheses and backticked
    names inside them do not count, the sentence ends at its period, and the package alone counts when listed."""
    doc = ("### What cachetool uses of compiler\nmay use any of `compiler`. Every other module imports only these "
           "public modules (x.py): `compiler.envs` (the registry, `compiler.secret` (nested)), `compiler` and\n"
           "`compiler.models.llama_config` (`read_config`).\nLater: `compiler.after`.\n")
    assert _architecture_public_modules(doc) == ["compiler.envs", "compiler", "compiler.models.llama_config"]


# cachetool/engines/vllm/child.py and cachetool_vllm_probe.py run in vLLM's interpreter (the probe inside vLLM's
# workers) and import neither package: they read Dynamo's counters there, the one private torch name outside
# torch_compat (docs/vllm.md).
PRIVATE_TORCH_ALLOWED = ("compiler/torch_compat/", "cachetool/engines/vllm/child.py",
                         "cachetool/engines/vllm/cachetool_vllm_probe.py")


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
    bad = []
    for rel, node in _nodes(("compiler/cache_key.py",)):
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
