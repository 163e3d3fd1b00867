"""Errors: exceptions told apart by type and fields, never by message text; every error class of compiler/ a
CompilerError with a kind; compiler errors turned into cachetool's in one place, by kind
(cachetool/engines/native/error_mapping.py)."""

from __future__ import annotations

import ast
import re

from tests.structure.modules import ROOT, modules, nodes

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
                new = {
                    t.id for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)
                } - texts
                texts |= new
                grew = grew or bool(new)
    lines = []
    for n in ast.walk(scope):
        if isinstance(n, ast.Compare) and any(text(side) for side in (n.left, *n.comparators)):
            if any(isinstance(op, (ast.In, ast.NotIn)) for op in n.ops) or (
                any(isinstance(op, (ast.Eq, ast.NotEq)) for op in n.ops)
                and any(
                    isinstance(side, ast.Constant) and isinstance(side.value, str) for side in (n.left, *n.comparators)
                )
            ):
                lines.append(n.lineno)
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in TEXT_MATCHERS
            and (text(n.func.value) or any(text(a) for a in n.args))
        ):
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
    """The native warm sorted the compiler's errors by 'strict mode' in their text, the OCI store its own by theirs,
    and the OCI TLS code sorted ssl errors by theirs in a function taking the exception: an error says its kind
    (compiler/errors.py), its class (cachetool/errors.py) or its fields (``ssl``'s ``verify_code``, ``reason``)."""
    bad, used = [], set()
    for path in modules().values():
        rel = str(path.relative_to(ROOT))
        for line, fn in sorted(_message_text_tests(ast.parse(path.read_text())).items()):
            if f"{rel}:{fn}" in MESSAGE_TEXT_ALLOWED:
                used.add(f"{rel}:{fn}")
            else:
                bad.append(f"{rel}:{line} ({fn})")
    assert bad == []
    assert sorted(set(MESSAGE_TEXT_ALLOWED) - used) == []  # an entry that reads no text any more goes


def test_the_message_text_check_finds_what_it_should():
    src = """
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
"""
    assert sorted(_message_text_tests(ast.parse(src)).values()) == [
        "by_annotation",
        "by_args",
        "by_fstring",
        "by_name",
        "in_branch",
    ]


def test_every_compiler_error_is_a_compiler_error():
    """compiler/errors.py: an embedder maps the pipeline's errors by ``kind``; a class ending in ``Error`` in
    compiler/ that does not derive from CompilerError (ConfigError and ModelSpecError were plain ValueErrors)
    has no kind to map."""
    bases: dict[str, list[str]] = {}
    where: dict[str, str] = {}
    for rel, node in nodes(()):
        if rel.startswith("compiler/") and isinstance(node, ast.ClassDef) and node.name.endswith("Error"):
            bases[node.name] = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
            where[node.name] = f"{rel}:{node.lineno}"

    def derives(name: str, seen: frozenset = frozenset()) -> bool:
        return name == "CompilerError" or any(
            b in bases and b not in seen and derives(b, seen | {name}) for b in bases.get(name, [])
        )

    assert sorted(where[n] for n in bases if not derives(n)) == []


def _compiler_error_classes() -> set[str]:
    """The names of compiler/'s classes deriving from CompilerError (``CompileInStrictMode``, ``RankFailed``, ...)."""
    bases: dict[str, list[str]] = {}
    for rel, node in nodes(()):
        if rel.startswith("compiler/") and isinstance(node, ast.ClassDef):
            bases[node.name] = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]

    def derives(name: str, seen: frozenset = frozenset()) -> bool:
        return name == "CompilerError" or any(
            b in bases and b not in seen and derives(b, seen | {name}) for b in bases.get(name, [])
        )

    return {n for n in bases if derives(n)}


def _compiler_errors_caught_by_class() -> list[str]:
    """``except <a compiler error class>`` in cachetool/: each such branch turns a compiler error into cachetool's
    by its class, where ``error_mapping.compiler_errors_mapped`` (``error_mapping.KIND_TO_ERROR``, in
    cachetool/engines/native/error_mapping.py) is the one place that does it, by kind."""
    classes = _compiler_error_classes()
    bad = []
    for rel, node in nodes(()):
        if rel.startswith("cachetool/") and isinstance(node, ast.ExceptHandler) and node.type is not None:
            types = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
            names = [t.id if isinstance(t, ast.Name) else getattr(t, "attr", "") for t in types]
            bad += [f"{rel}:{node.lineno} except {n}" for n in names if n in classes]
    return sorted(bad)


def test_compiler_errors_become_cachetools_in_one_place_by_kind():
    assert {"CompileInStrictMode", "ConfigError", "ModelSpecError", "RankFailed"} <= _compiler_error_classes()
    assert _compiler_errors_caught_by_class() == []
