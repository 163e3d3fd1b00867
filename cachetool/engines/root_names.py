"""The names the engines give on disk under a cache root (the root itself is :mod:`cachetool.cache_root`'s)::

{root}/
  torch_compile_cache/                               TCC: the native and vLLM engines' compiled code
    {hash10}/rank_{r}_{dp}/{prefix}/                 a piecewise key folder per rank (RANK_RE); the native
      cache_key_factors.json                         engine's, and vLLM's piecewise graphs (prefix "backbone")
      compile_index.json, artifact_*, aot_entry.bin  (the native engine's: docs/ARCHITECTURE.md)
      inductor_cache/, triton_cache/                 Inductor's and Triton's caches during compile and load
    torch_aot_compile/{hash}/rank_{r}_{dp}/          AOT: vLLM's AOT key folder (torch >= 2.10)
      model, cache_key_factors.json                  the artifact; the key inputs `warm --engine vllm` records
  modelinfos/, triton_cache/                         vLLM's own (cachetool.engines.vllm.root_names)
  .cachetool-incomplete/{start}.json                 INCOMPLETE_DIR: a start not finished, and the key folders
                                                     it left unfinished (the vLLM and torch engines')
"""

from __future__ import annotations

import re

__all__ = ["AOT", "FACTORS_FILE", "INCOMPLETE_DIR", "RANK_RE", "TCC"]

TCC = "torch_compile_cache"
AOT = "torch_aot_compile"
RANK_RE = re.compile(r"^rank_\d+_\d+$")
FACTORS_FILE = "cache_key_factors.json"
INCOMPLETE_DIR = ".cachetool-incomplete"
