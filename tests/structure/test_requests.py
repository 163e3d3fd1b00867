"""A request built once and handed down: the install's and a start's options listed once, with their defaults
(issue 37, item 1), and the native start's run settled once (item 3: its config parsed and rooted once, tensor
parallelism dispatched once)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.structure.modules import ROOT, modules

# The install's options are listed once (issue 37, item 1): cachetool/install/options.py's InstallOptions, each with
# its default, which a pull's request (transfer.pull.PullRequest) extends; the API builds one value from its keywords
# and every layer below hands it down. Before, api.install, install.install_bundle, api.pull, api.pull_outcome and
# api.pull_request each took every option with its default again (api.py's three pull functions ~21 keywords each),
# and api.pull, api.pull_outcome and transfer.pull passed every one on by name. The CLI, where flags become the
# request's keywords, names each flag once and is not a layer below. The same for a start's options in the API:
# each engine's own request holds their defaults alone (api.warm, api.check and api.start_request each listed them,
# and _given again); the native engine's has the most.
# (file, class, the modules that must not list its fields again)
OPTIONS = (
    ("cachetool/install/options.py", "InstallOptions", "cachetool."),
    ("cachetool/engines/native/start.py", "NativeStartRequest", "cachetool.api"),
)


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
        bad += [
            f"{path.relative_to(ROOT)}:{line} lists {cls}'s fields again"
            for mod, path in modules().items()
            if mod.startswith(scope) and not mod.startswith("cachetool.cli")
            for line in _relisted(ast.parse(path.read_text()), fields)
        ]
    assert bad == []


def test_the_options_rule_catches_what_it_names():
    fields = _fields(ROOT / "cachetool/install/options.py", "InstallOptions")
    src = (
        "def pull(ref, root=None, *, trust=None, insecure_skip_verify=False, ranks=None, device=None, force=False,\n"
        "         keep_changed=False, preflight=True, warn=None, workers=None, timeout=None): ...\n"
        "install_bundle(src, root, trust=t, ranks=r, device=d, force=f, keep_changed=k)\n"
        "install_bundle(src, root, request.install_options(trust=t, device=d), key_check=k, deadline=x)\n"
        "def verified_manifest(source, *, trust=None, insecure_skip_verify=False, warn=None): ...\n"
        "def install(bundle, cache_root=None, *, key_check=None, deadline=None, **options): ...\n"
    )
    assert _relisted(ast.parse(src), fields) == [1, 3]


# The native start builds its run configuration once (issue 37, item 3): the engine parses a start's config once
# (start_request, which the API asks for the engine's own request) into one engines.native.start.NativeStartRequest,
# whose config is put on the cache root once; run.start checks it and dispatches tensor
# parallelism once. Before, a warm's config was parsed twice by the engine (configured_root for the API's root, then
# for the run), copied and re-rooted by the run (twice more for each tensor-parallel rank), and run.warm and run._run
# each dispatched on the size.
def _native_run_settlings(tree: ast.AST) -> dict[str, list[int]]:
    """Lines that put a config on a root (``X.cache_dir = ...``) and lines that dispatch on the tensor-parallel size
    (a comparison of ``tensor_parallel_size`` with 1)."""
    found: dict[str, list[int]] = {"roots a config": [], "dispatches tensor parallelism": []}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Attribute) and t.attr == "cache_dir" for t in node.targets
        ):
            found["roots a config"].append(node.lineno)
        elif (
            isinstance(node, ast.Compare)
            and "tensor_parallel_size" in ast.unparse(node.left)
            and all(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops)
            and any(isinstance(c, ast.Constant) and c.value == 1 for c in node.comparators)
        ):
            found["dispatches tensor parallelism"].append(node.lineno)
    return found


def _config_parses(tree: ast.AST) -> list[int]:
    """Lines that parse a compilation config: calls of ``compilation_config`` or ``parse_compilation_config``."""
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and ast.unparse(node.func).split(".")[-1] in ("compilation_config", "parse_compilation_config")
    )


def test_the_native_start_settles_its_run_once():
    native = [p for mod, p in modules().items() if mod.startswith("cachetool.engines.native")]
    counts = {
        what: sum(len(_native_run_settlings(ast.parse(p.read_text()))[what]) for p in native)
        for what in ("roots a config", "dispatches tensor parallelism")
    }
    assert counts == {"roots a config": 1, "dispatches tensor parallelism": 1}
    engine = ROOT / "cachetool" / "engines" / "native" / "engine.py"
    [settle] = [
        node
        for node in ast.walk(ast.parse(engine.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name == "start_request"
    ]
    assert len(_config_parses(settle)) == 1, "the engine parses a start's config once"


def test_the_native_run_rule_catches_what_it_names():
    src = (
        "cfg.cache_dir = str(root)\nif tensor_parallel_size != 1:\n    pass\n"
        "x = a if run.tensor_parallel_size != 1 else b\nn = tensor_parallel_size < 1\nc.cache_dir\n"
    )
    parses = (
        "run.compilation_config(c, o)\ncfg = compilation_config\nparse_compilation_config()\nrun.config_on_root(c, r)\n"
    )
    assert _config_parses(ast.parse(parses)) == [1, 3]
    found = _native_run_settlings(ast.parse(src))
    assert {what: sorted(lines) for what, lines in found.items()} == {
        "roots a config": [1],
        "dispatches tensor parallelism": [2, 4],
    }
