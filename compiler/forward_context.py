"""Per-step state the attention op reads, set around each forward call (vLLM's forward context).

Keeping batch metadata and KV caches out of the graph inputs is what lets one compiled graph serve
prefill and decode batches of any token count: the graph only sees ``input_ids`` and ``positions``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch


@dataclass
class AttentionMetadata:
    """A flattened batch: sequence ``i`` owns query rows ``query_start_loc[i]:query_start_loc[i+1]``,
    has ``seq_lens[i]`` tokens in total after this step (cached context + new tokens), and its KV cache
    slots start at ``slot_offsets[i]``. ``slot_mapping[t]`` is the cache slot of new token ``t``."""

    query_start_loc: list[int]
    seq_lens: list[int]
    slot_offsets: list[int]
    slot_mapping: torch.Tensor

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens)

    @property
    def num_tokens(self) -> int:
        return self.query_start_loc[-1]


@dataclass
class ForwardContext:
    attn_metadata: AttentionMetadata | None = None
    kv_caches: dict[str, torch.Tensor] = field(default_factory=dict)


_CURRENT: ForwardContext | None = None


def get_forward_context() -> ForwardContext | None:
    return _CURRENT


@contextlib.contextmanager
def set_forward_context(ctx: ForwardContext | None) -> Iterator[None]:
    global _CURRENT
    prev, _CURRENT = _CURRENT, ctx
    try:
        yield
    finally:
        _CURRENT = prev
