"""The cache root travels as a value (issue 37, item 3): only cachetool/cache_root.py expands or resolves a root,
and the default root is written once a package."""

from __future__ import annotations

import ast
import re

from tests.structure.modules import ROOT, modules

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
    bad = [
        f"{path.relative_to(ROOT)}:{line}"
        for mod, path in modules().items()
        if mod.startswith("cachetool.") and mod != "cachetool.cache_root"
        for line in _root_expansions(ast.parse(path.read_text()))
    ]
    assert bad == []


def test_the_root_expansion_rule_catches_what_it_names():
    src = (
        "root = Path(request.cache_root).expanduser()\nx = root.resolve()\ncfg = str(Path(cache_root).absolute())\n"
        "os.path.expanduser(root_text)\np = Path(model).expanduser()\nkey = Path(entry).expanduser().resolve()\n"
        "root.path / PARTIAL_DIR\nroot.resolved\n"
    )
    assert _root_expansions(ast.parse(src)) == [1, 2, 3, 4]


def test_the_default_cache_root_is_written_once_a_package():
    """cachetool's registry holds the native root's default (the native engine reads it there, the help texts from
    the engine); the pipeline's own registry, which must not import cachetool, holds the same value once
    (test_every_environment_variable_is_registered_and_in_the_readme checks that they agree)."""
    default = re.compile(r"~/\.cache/cachetool(?![-\w])")
    written = {
        str(path.relative_to(ROOT)): n for path in modules().values() if (n := len(default.findall(path.read_text())))
    }
    assert written == {"cachetool/envs.py": 1, "compiler/envs.py": 1}
