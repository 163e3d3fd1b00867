"""Split a Dynamo graph at ``splitting_ops`` (attention) into pieces, and fingerprint pieces.

Each splitting op becomes a piece of its own (run eagerly); the nodes between them form the pieces that are
compiled. Identical layers give pieces that differ only in placeholder names, so :func:`graph_hash`
canonicalises names before hashing: a 16-layer Llama has 17 compiled pieces but 3 unique ones.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch.fx.passes.split_module import split_module

from compiler import torch_compat


@dataclass
class SplitItem:
    submod_name: str
    graph_id: int
    is_splitting_graph: bool
    graph: fx.GraphModule


def op_name(target: Any) -> str | None:
    """``ns.op`` for an OpOverloadPacket or an overload (``ns.op.default`` → ``ns.op``)."""
    if torch_compat.is_op_overload_packet(target):
        return str(target)
    if torch_compat.is_op_overload(target):
        name = str(target)
        return name.rsplit(".", 1)[0] if name.count(".") >= 2 else name
    return None


def is_splitting_node(node: fx.Node, ops: set[str]) -> bool:
    if node.op != "call_function":
        return False
    name = op_name(node.target)
    return name is not None and (name in ops or str(node.target) in ops)


def split_graph(graph: fx.GraphModule, splitting_ops: list[str]) -> tuple[fx.GraphModule, list[SplitItem]]:
    ops = set(splitting_ops)
    subgraph_id = 0
    node_to_id: dict[fx.Node, int] = {}
    splitting_ids: list[int] = []
    for node in graph.graph.nodes:
        if node.op in ("output", "placeholder"):
            continue
        if is_splitting_node(node, ops):
            subgraph_id += 1
            node_to_id[node] = subgraph_id
            splitting_ids.append(subgraph_id)
            subgraph_id += 1
        else:
            node_to_id[node] = subgraph_id
    split_gm = split_module(graph, None, lambda n: node_to_id[n], keep_original_order=True)  # type: ignore[arg-type]  # baseline (issue 46)
    items: list[SplitItem] = []
    names = [name for (name, _) in split_gm.named_modules()]
    for name in names:
        if "." in name or name == "":
            continue
        module = getattr(split_gm, name)
        graph_id = int(name.replace("submod_", ""))
        items.append(SplitItem(name, graph_id, graph_id in splitting_ids, module))
    items.sort(key=lambda x: x.graph_id)
    return split_gm, items


def _describe_val(val: Any) -> str:
    if isinstance(val, torch.Tensor):
        return (
            f"T[{tuple(str(s) for s in val.shape)},{tuple(str(s) for s in val.stride())},{val.dtype},{val.device.type}]"
        )
    if isinstance(val, torch.SymInt):
        return f"S[{val}]"
    return type(val).__name__ + repr(val)


def canonical_graph_text(gm: fx.GraphModule, example_inputs: list[Any] | None = None) -> str:
    """The graph with nodes renamed by position, plus input metadata: equal for identical layers."""
    names: dict[fx.Node, str] = {}
    lines: list[str] = []
    placeholder_i = 0
    for i, node in enumerate(gm.graph.nodes):
        names[node] = f"n{i}"

    def fmt(a: Any) -> str:
        if isinstance(a, fx.Node):
            return names[a]
        if isinstance(a, (list, tuple)):
            inner = ",".join(fmt(x) for x in a)
            return f"[{inner}]" if isinstance(a, list) else f"({inner})"
        if isinstance(a, dict):
            return "{" + ",".join(f"{k}:{fmt(v)}" for k, v in sorted(a.items())) + "}"
        if isinstance(a, str):
            return repr(a)
        return repr(a)

    for node in gm.graph.nodes:
        if node.op == "placeholder":
            meta = ""
            if example_inputs is not None and placeholder_i < len(example_inputs):
                meta = _describe_val(example_inputs[placeholder_i])
            elif "val" in node.meta:
                meta = _describe_val(node.meta["val"])
            placeholder_i += 1
            lines.append(f"{names[node]}=placeholder {meta}")
            continue
        if node.op == "get_attr":
            target = "attr"  # attribute names differ per layer; constants are lifted by Dynamo
        elif node.op in ("call_function",):
            named = callable(node.target) and not torch_compat.is_op_overload(node.target)
            target = (
                getattr(node.target, "__module__", "") + "." + getattr(node.target, "__qualname__", str(node.target))
                if named
                else str(node.target)
            )
        else:
            target = str(node.target)
        lines.append(f"{names[node]}={node.op} {target} {fmt(node.args)} {fmt(node.kwargs)}")
    return "\n".join(lines)


def graph_hash(gm: fx.GraphModule, example_inputs: list[Any] | None = None) -> str:
    return hashlib.sha256(canonical_graph_text(gm, example_inputs).encode()).hexdigest()
