"""A CUDA-graph-safe path of the attention op: every shape and index lives in tensors.

The eager path of ``cachetool.unified_attention_with_output`` loops over the sequences of the batch with Python
ints (query_start_loc, seq_lens), which a CUDA graph would freeze. This path instead gives each token a window of
its sequence's KV cache: token ``t`` attends to slots ``seq_offset[t] + j`` for ``j <= position[t]`` within a fixed
window of ``window`` (= max_model_len) slots. All of it is static in shape for a given (padded) token count, so a
FULL graph captured once replays for any batch of that size: prefill, decode or mixed
(:data:`ATTENTION_CG_SUPPORT` is ``ALWAYS``). The cost is O(tokens x window) per layer, which is why prefill and
mixed batches default to piecewise graphs (eager attention) and only decode batches to full graphs.

Padding tokens get ``seq_offset = 0``, ``position = 0`` (they read slot 0, a finite value) and write their K/V to
the cache's last slot, a scratch slot the runner allocates beyond every sequence's range.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from compiler.cudagraph_dispatcher import AttentionCGSupport
from compiler.forward_context import AttentionMetadata

ATTENTION_CG_SUPPORT = AttentionCGSupport.ALWAYS


@dataclass
class StaticAttentionInputs:
    """Persistent per-token tensors (slices of the runner's buffers, so their addresses never change)."""

    seq_offsets: torch.Tensor  # [T] long: first KV slot of each token's sequence
    positions: torch.Tensor  # [T] long: each token's position in its sequence
    window: int  # KV slots each sequence owns (max_model_len)


@dataclass
class GraphAttentionMetadata(AttentionMetadata):
    """:class:`AttentionMetadata` plus what the graph-safe path needs. ``num_actual_tokens`` is the batch's own
    token count (the rest up to ``slot_mapping``'s length is padding)."""

    num_actual_tokens: int = 0
    static: StaticAttentionInputs | None = None


def static_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    output: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    static: StaticAttentionInputs,
) -> None:
    """query/output ``[T, H*D]``, key/value ``[T, Hkv*D]``, kv_cache ``[2, slots, Hkv, D]``."""
    t = query.shape[0]
    hkv, d = kv_cache.shape[2], kv_cache.shape[3]
    k = key.reshape(t, hkv, d)  # reshape: a compiled piece may hand in non-contiguous strides
    v = value.reshape(t, hkv, d)
    kv_cache[0].index_copy_(0, slot_mapping[:t], k.to(kv_cache.dtype))
    kv_cache[1].index_copy_(0, slot_mapping[:t], v.to(kv_cache.dtype))
    q = query.reshape(t, -1, d)
    h = q.shape[1]
    j = torch.arange(static.window, device=query.device)
    idx = static.seq_offsets[:t, None] + j[None, :]  # [T, W]
    ks = kv_cache[0][idx]  # [T, W, Hkv, D]
    vs = kv_cache[1][idx]
    if hkv != h:  # grouped-query heads; expand, not repeat_interleave (which syncs and breaks capture)
        w, rep = ks.shape[1], h // hkv
        ks = ks[:, :, :, None, :].expand(t, w, hkv, rep, d).reshape(t, w, h, d)
        vs = vs[:, :, :, None, :].expand(t, w, hkv, rep, d).reshape(t, w, h, d)
    mask = (j[None, :] <= static.positions[:t, None])[:, None, None, :]  # [T, 1, 1, W]
    out = F.scaled_dot_product_attention(
        q[:, :, None, :], ks.transpose(1, 2), vs.transpose(1, 2), attn_mask=mask
    )  # [T, H, 1, D]
    output.view(t, h, d).copy_(out[:, :, 0, :].to(output.dtype))
