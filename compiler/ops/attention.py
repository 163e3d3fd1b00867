"""Attention as a registered custom op: ``torch.ops.cachetool.unified_attention_with_output``.

The op is opaque to Dynamo and Inductor; it is where the graph is split (``splitting_ops``). It writes its
result into ``output`` (passed in, allocated by the preceding compiled piece) and reads/writes the layer's KV
cache found in the forward context by ``layer_name``, so the same graph serves prefill and decode batches.
Without a forward context (eager use, tests) it runs plain causal attention over the whole batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from compiler.forward_context import get_forward_context

OP_NAME = "cachetool::unified_attention_with_output"


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool) -> torch.Tensor:
    # q: [Tq, H, D]; k, v: [Tk, Hkv, D] -> [Tq, H, D]
    h, hkv = q.shape[1], k.shape[1]
    if hkv != h:
        k = k.repeat_interleave(h // hkv, dim=1)
        v = v.repeat_interleave(h // hkv, dim=1)
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask, is_causal=causal and mask is None
    )
    return out.transpose(0, 1)


@torch.library.custom_op(OP_NAME, mutates_args=("output",))
def unified_attention_with_output(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, output: torch.Tensor, layer_name: str
) -> None:
    """query/output ``[T, H*D]``, key/value ``[T, Hkv*D]``; the KV cache is ``[2, slots, Hkv, D]``."""
    num_tokens = query.shape[0]
    ctx = get_forward_context()
    kv_cache = ctx.kv_caches.get(layer_name) if ctx is not None else None
    if kv_cache is None:
        if ctx is not None and ctx.attn_metadata is not None:
            raise KeyError(f"no KV cache for attention layer {layer_name!r}")
        # No batch metadata (eager use): causal attention over the whole batch as one sequence.
        d = _HEAD_DIMS.get(layer_name)
        if d is None:
            raise KeyError(f"unknown attention layer {layer_name!r} (not registered with register_layer)")
        q = query.reshape(num_tokens, -1, d)
        k = key.reshape(num_tokens, -1, d)
        v = value.reshape(num_tokens, -1, d)
        output.copy_(_sdpa(q, k, v, None, causal=True).reshape(output.shape))
        return
    hkv, d = kv_cache.shape[2], kv_cache.shape[3]
    meta = ctx.attn_metadata  # type: ignore[union-attr]  # baseline (issue 46)
    static = getattr(meta, "static", None)
    if static is not None:  # inside a FULL CUDA graph: shapes and indices in tensors only
        from compiler.ops.static_attention import static_attention

        static_attention(query, key, value, output, kv_cache, meta.slot_mapping, static)  # type: ignore[union-attr]  # baseline (issue 46)
        return
    # reshape, not view: the compiled graph may hand in non-contiguous strides
    q = query.reshape(num_tokens, -1, d)
    k = key.reshape(num_tokens, hkv, d)
    v = value.reshape(num_tokens, hkv, d)
    out = torch.empty_like(q)
    slots = meta.slot_mapping[:num_tokens]  # type: ignore[union-attr]  # baseline (issue 46)
    kv_cache[0].index_copy_(0, slots, k.to(kv_cache.dtype))
    kv_cache[1].index_copy_(0, slots, v.to(kv_cache.dtype))
    for i in range(meta.num_seqs):  # type: ignore[union-attr]  # baseline (issue 46)
        start, end = meta.query_start_loc[i], meta.query_start_loc[i + 1]  # type: ignore[union-attr]  # baseline (issue 46)
        if end <= start:
            continue
        seq_len = meta.seq_lens[i]  # type: ignore[union-attr]  # baseline (issue 46)
        off = meta.slot_offsets[i]  # type: ignore[union-attr]  # baseline (issue 46)
        ks = kv_cache[0, off : off + seq_len]
        vs = kv_cache[1, off : off + seq_len]
        nq = end - start
        if nq == 1:
            mask = None  # one query at the last position sees the whole context
        else:
            ctx_len = seq_len - nq
            qpos = torch.arange(ctx_len, seq_len, device=query.device)[:, None]
            kpos = torch.arange(seq_len, device=query.device)[None, :]
            mask = kpos <= qpos
        out[start:end] = _sdpa(q[start:end], ks, vs, mask, causal=False).to(out.dtype)
    output.copy_(out.reshape(output.shape))


@unified_attention_with_output.register_fake
def _(query, key, value, output, layer_name) -> None:  # noqa: ANN001
    return None


_HEAD_DIMS: dict[str, int] = {}


def register_layer(layer_name: str, head_dim: int) -> None:
    """Record a layer's head size, so that the op can run without a KV cache (eager use)."""
    _HEAD_DIMS[layer_name] = head_dim
