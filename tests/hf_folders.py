"""The tiny model as a Hugging Face folder (``config.json`` and ``model.safetensors``), as a user's model arrives."""

from __future__ import annotations

import json
from pathlib import Path


def hf_config(preset: str = "tiny") -> dict:
    """A Hugging Face ``config.json`` (as a dict) of a preset."""
    from compiler.models.llama import PRESETS

    c = PRESETS[preset]
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads,
        "head_dim": c.head_dim,
        "rms_norm_eps": c.rms_norm_eps,
        "rope_theta": c.rope_theta,
        "max_position_embeddings": c.max_position_embeddings,
        "tie_word_embeddings": c.tie_word_embeddings,
    }


def hf_tensors(model) -> dict:  # noqa: ANN001
    """A TP=1 model's weights under Hugging Face names: q/k/v and gate/up unstacked, no rotary buffers."""
    c = model.config
    q, kv, i = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim, c.intermediate_size
    out = {}
    for name, p in model.state_dict().items():
        if ".qkv_proj." in name:
            for part, (s, n) in zip("qkv", ((0, q), (q, kv), (q + kv, kv))):
                out[name.replace("qkv_proj", f"{part}_proj")] = p[s : s + n].clone()
        elif ".gate_up_proj." in name:
            out[name.replace("gate_up_proj", "gate_proj")] = p[:i].clone()
            out[name.replace("gate_up_proj", "up_proj")] = p[i:].clone()
        elif "inv_freq" not in name:
            out[name] = p
    return out


def write_hf_folder(folder: Path, seed: int = 0):  # noqa: ANN201
    """The tiny model (random init with ``seed``) as a Hugging Face folder; returns that model."""
    from compiler.models.llama import build_model
    from compiler.models.safetensors_io import save_safetensors

    model = build_model("tiny", seed=seed)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(hf_config()))
    save_safetensors(hf_tensors(model), folder / "model.safetensors")
    return model
