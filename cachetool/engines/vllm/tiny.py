"""A model small enough for real vLLM on a 2-core CPU: a 2-layer Llama ``config.json`` (dummy weights are built
from it) and the ``vllm serve`` flags that fit it on a small box. Used by the tests and ``bench_vllm.py``."""

from __future__ import annotations

import json
from pathlib import Path

# head_dim 32: vLLM's CPU attention refuses some sizes (24 is refused).
TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
              "intermediate_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
              "vocab_size": 1024, "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
              "torch_dtype": "bfloat16", "tie_word_embeddings": False, "head_dim": 32}
# On the CPU gpu_memory_utilization is the worker's share of RAM (model and KV cache); 0.92 refuses to start here.
# 0.06 of 24 GiB leaves ~0.75 GiB of KV cache after vLLM's ~0.66 GiB of other use, ample for 4 sequences of 256
# tokens: vLLM fills its KV cache at every start, and 0.15 (2.9 GiB) took ~8 s of each start on 2 cores, 0.06 <1 s.
CPU_FLAGS = ["--dtype", "bfloat16", "--max-model-len", "256", "--max-num-seqs", "4", "--max-num-batched-tokens",
             "256", "--gpu-memory-utilization", "0.06"]


def write_model(folder: Path, **changes) -> Path:
    """``folder/config.json`` of the tiny Llama (``changes`` override its fields); returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**TINY_LLAMA, **changes}))
    return folder

# Llama-3.2-1B's config.json (its published shape; dummy weights): the GPU runs' model (docs/gpu.md).
LLAMA_3_2_1B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
                "intermediate_size": 8192, "num_attention_heads": 32, "num_key_value_heads": 8,
                "num_hidden_layers": 16, "head_dim": 64, "vocab_size": 128256, "max_position_embeddings": 131072,
                "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": True,
                "torch_dtype": "bfloat16", "bos_token_id": 128000, "eos_token_id": 128001,
                "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                 "original_max_position_embeddings": 8192, "rope_type": "llama3"}}
GPU_FLAGS = ["--max-model-len", "2048", "--gpu-memory-utilization", "0.5"]


def write_llama_1b(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(LLAMA_3_2_1B))
    return folder
