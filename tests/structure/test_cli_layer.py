"""The CLI is a layer over the library's API (docs/ARCHITECTURE.md, "The Python API"): its modules parse flags and
render what :mod:`cachetool.api` returns, and import nothing else of the library but the error classes and the
exit-code table. Before, ``pull`` built its failure outcomes with ``pull_policy`` and picked the default root with
``engines``, ``check --engine vllm --require-hit`` decided the miss itself, and ``warm``/``check`` set up
``compiler.logger``: policy a Python caller of the API did not get, or got otherwise."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.structure.modules import PACKAGES, ROOT

CLI = ROOT / "cachetool" / "cli"

# What every CLI module may import of the project: the API, the error classes, the exit-code table, the CLI itself.
LAYER = ("cachetool.api", "cachetool.errors", "cachetool.exit_codes")

# (file, module, name or None): why it is not the API's.
ALLOWED = {
    ("group.py", "cachetool.version", "__version__"): "the package's version, for --version: no verb's",
    ("__init__.py", "cachetool.envs", None): "how the CLI reports a failure (CACHETOOL_LOGGING_LEVEL=DEBUG prints "
    "its traceback) is the CLI's own switch, read through the registry",
}


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imports(path: Path):
    """(module, name or None) of every project import in ``path``, at any depth (a ``from pkg import mod`` of a
    module is that module)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((a.name, None) for a in node.names if a.name.split(".")[0] in PACKAGES)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
            assert not node.level, f"{path.name}: a relative import"
            for a in node.names:
                full = f"{node.module}.{a.name}"
                yield (full, None) if _is_module(full) else (node.module, a.name)


def _layer(module: str) -> bool:
    return module in LAYER or module == "cachetool.cli" or module.startswith("cachetool.cli.")


def test_the_cli_imports_only_the_api_errors_and_exit_codes():
    used, outside = set(), []
    for path in sorted(CLI.glob("*.py")):
        for module, name in _imports(path):
            if _layer(module):
                continue
            key = (path.name, module, name) if (path.name, module, name) in ALLOWED else (path.name, module, None)
            if key in ALLOWED:
                used.add(key)
            else:
                outside.append(f"cli/{path.name}: {module}" + (f".{name}" if name else ""))
    assert outside == [], "the CLI renders the API's results; give the API what it needs instead"
    assert sorted(set(ALLOWED) - used) == [], "an allowance no module needs any more"


def _taken_from_api(path: Path) -> set[str]:
    """The names a CLI module takes from the API: ``from cachetool.api import X`` and ``api.X``."""
    tree = ast.parse(path.read_text())
    names = {
        a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "cachetool.api" for a in n.names
    }
    bound = {
        a.asname or a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module == "cachetool"
        for a in n.names
        if a.name == "api"
    }
    return names | {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in bound
    }


def test_what_the_cli_takes_from_the_api_is_declared_there():
    """The verbs (``api.__all__``, also cachetool's top-level names) and what the CLI renders and parses with
    (``api.CLI_NAMES``): two explicit lists, each name in one, none unused."""
    from cachetool import api

    taken = set().union(*(_taken_from_api(p) for p in CLI.glob("*.py")))
    assert sorted(taken - set(api.__all__) - set(api.CLI_NAMES)) == []
    assert sorted(set(api.CLI_NAMES) - taken) == [] and not set(api.CLI_NAMES) & set(api.__all__)
    assert [n for n in api.CLI_NAMES if not hasattr(api, n)] == []
