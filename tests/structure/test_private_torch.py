"""Private torch names (``torch._dynamo``, ``torch._inductor``...) only in compiler/torch_compat/ and the modules an
engine runs in its own interpreter: one place to adapt when torch changes (torch 2.11 on the H200, 2.13 here)."""

from __future__ import annotations

import ast

from tests.structure.modules import is_private, nodes, runs_in_the_engines_interpreter

PRIVATE_TORCH_ALLOWED = ("compiler/torch_compat/", *runs_in_the_engines_interpreter())


def test_private_torch_only_in_torch_compat():
    def private(dotted: str) -> bool:
        parts = dotted.split(".")
        return parts[0] == "torch" and any(is_private(p) for p in parts[1:])

    bad = []
    for rel, node in nodes(PRIVATE_TORCH_ALLOWED):
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
