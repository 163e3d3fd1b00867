"""The folders a vLLM server keeps at the top of its cache root, beside the compiled code
(:mod:`cachetool.engines.root_names`): each is an install unit of its own, installed whole or not at all."""

from __future__ import annotations

__all__ = ["MODELINFOS", "TRITON_CACHE"]

MODELINFOS = "modelinfos"  # vLLM's model inspection cache
TRITON_CACHE = "triton_cache"  # TRITON_CACHE_DIR of a vLLM server
