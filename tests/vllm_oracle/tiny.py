"""A model small enough for real vLLM on a 2-core CPU: a 2-layer Llama ``config.json`` (dummy weights are built
from it) and the ``vllm serve`` flags that fit it on a small box. Used by the tests and ``bench_vllm.py``."""

from __future__ import annotations

import json
from pathlib import Path

# head_dim 32: vLLM's CPU attention refuses some sizes (24 is refused).
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 1024,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
    "head_dim": 32,
}
# The KV cache sized in bytes, not by --gpu-memory-utilization: on the CPU that is a share of the NUMA node's RAM
# less what the worker already holds, so a share that fits one machine refuses to start on a smaller one. 64 MiB
# (512 bytes a token of this model) is ample for 4 sequences of 256, and small keeps starts short: vLLM fills its KV
# cache at every start. vLLM leaves the KV cache size out of its compile hash.
CPU_FLAGS = [
    "--dtype",
    "bfloat16",
    "--max-model-len",
    "256",
    "--max-num-seqs",
    "4",
    "--max-num-batched-tokens",
    "256",
    "--kv-cache-memory-bytes",
    str(64 * 2**20),
]


def write_model(folder: Path, **changes) -> Path:
    """``folder/config.json`` of the tiny Llama (``changes`` override its fields); returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**TINY_LLAMA, **changes}))
    return folder


# Llama-3.2-1B's config.json (its published shape; dummy weights): the GPU runs' model (docs/gpu.md).
LLAMA_3_2_1B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 16,
    "head_dim": 64,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "rope_scaling": {
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
}
GPU_FLAGS = ["--max-model-len", "2048", "--gpu-memory-utilization", "0.5"]


def write_llama_1b(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(LLAMA_3_2_1B))
    return folder
