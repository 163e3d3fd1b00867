"""The Llama-family model config: presets, Hugging Face ``config.json`` parsing, and the values that enter the
cache key. Torch-free, so that a preflight can predict a server's key without importing torch."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from compiler.errors import MODEL, CompilerError


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    name: str = "llama"

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any], name: str = "hf") -> LlamaConfig:
        heads = int(d["num_attention_heads"])
        hidden = int(d["hidden_size"])
        rope_scaling = d.get("rope_scaling")
        return cls(
            vocab_size=int(d["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(d["intermediate_size"]),
            num_hidden_layers=int(d["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=int(d.get("num_key_value_heads") or heads),
            head_dim=int(d.get("head_dim") or hidden // heads),
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-5)),
            rope_theta=float(d.get("rope_theta", 10000.0)),
            rope_scaling=dict(rope_scaling) if rope_scaling else None,
            max_position_embeddings=int(d.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
            name=name,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 32.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}

PRESETS: dict[str, LlamaConfig] = {
    # 4 layers so that the middle pieces repeat (5 pieces, 3 unique); small enough for CPU tests.
    "tiny": LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
        name="tiny",
    ),
    "llama-3.2-1b": LlamaConfig(
        vocab_size=128256,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        rope_theta=500000.0,
        rope_scaling=dict(_LLAMA3_ROPE),
        max_position_embeddings=131072,
        tie_word_embeddings=True,
        name="llama-3.2-1b",
    ),
    "llama-3.1-8b": LlamaConfig(
        vocab_size=128256,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        rope_theta=500000.0,
        rope_scaling={**_LLAMA3_ROPE, "factor": 8.0},
        max_position_embeddings=131072,
        tie_word_embeddings=False,
        name="llama-3.1-8b",
    ),
}


class ModelSpecError(CompilerError, ValueError):
    """The model argument is neither a preset, nor a config.json, nor a folder holding one (or its weights do not
    fit it). Also a ValueError, for callers that catch those."""

    kind = MODEL


def read_config(spec: str) -> tuple[LlamaConfig, Path | None]:
    """A preset name, a ``config.json`` path, or a HF folder → (config, the folder or None); weights unread."""
    if spec in PRESETS:
        return PRESETS[spec], None
    path = Path(spec)
    if path.is_dir():
        cfg_file = path / "config.json"
        if not cfg_file.is_file():
            raise ModelSpecError(f"model folder {spec} has no config.json")
        folder: Path | None = path
    elif path.is_file():
        cfg_file, folder = path, None
    else:
        raise ModelSpecError(f"unknown model {spec!r}: not a preset ({', '.join(PRESETS)}) nor a config.json or folder")
    try:
        data = json.loads(cfg_file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelSpecError(f"cannot read model config {cfg_file}: {exc}") from None
    _check_llama_config(data, cfg_file)
    try:
        cfg = LlamaConfig.from_hf_dict(data, name=data.get("_name_or_path") or path.name)
    except (TypeError, ValueError) as exc:
        raise ModelSpecError(f"bad value in model config {cfg_file}: {exc}") from None
    _check_dims(cfg, cfg_file)
    return cfg, folder


def default_dtype(device: str) -> str:
    """The dtype a model is built in when none is given (bf16 on CUDA, fp32 on the CPU)."""
    return "bfloat16" if device.startswith("cuda") else "float32"


def config_values(cfg: LlamaConfig, dtype: str, parallel_config: dict[str, Any]) -> dict[str, Any]:
    """What of the model config changes the compiled code (hashed into the ``config`` factor)."""
    values = {f.name: getattr(cfg, f.name) for f in fields(LlamaConfig) if f.name != "name"}
    return values | {"architecture": "LlamaForCausalLM", "dtype": dtype, "parallel_config": parallel_config}


LLAMA_ARCHITECTURES = ("LlamaForCausalLM",)
_REQUIRED_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")


def _check_llama_config(data: Any, cfg_file: Path) -> None:
    """A Hugging Face config of the Llama family: refuse other architectures and missing dimensions."""
    if not isinstance(data, dict):
        raise ModelSpecError(f"model config {cfg_file} is not a JSON object")
    archs = data.get("architectures") or []
    archs = [archs] if isinstance(archs, str) else list(archs) if isinstance(archs, list) else [str(archs)]
    model_type = data.get("model_type")
    if (archs and not any(a in LLAMA_ARCHITECTURES for a in archs)) or model_type not in (None, "llama"):
        what = ", ".join(map(str, archs)) or f"model_type {model_type!r}"
        raise ModelSpecError(
            f"model config {cfg_file} is not a Llama config ({what}); supported: {', '.join(LLAMA_ARCHITECTURES)}"
        )
    missing = [k for k in _REQUIRED_KEYS if k not in data]
    if missing:
        raise ModelSpecError(
            f"model config {cfg_file} lacks {', '.join(missing)} (a Llama config needs {', '.join(_REQUIRED_KEYS)})"
        )


def _check_dims(cfg: LlamaConfig, cfg_file: Path) -> None:
    for name in (
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
    ):
        if getattr(cfg, name) <= 0:
            raise ModelSpecError(
                f"bad value in model config {cfg_file}: {name} must be positive, got {getattr(cfg, name)}"
            )
    if cfg.num_attention_heads % cfg.num_key_value_heads:
        raise ModelSpecError(
            f"bad value in model config {cfg_file}: num_attention_heads "
            f"{cfg.num_attention_heads} is not a multiple of num_key_value_heads "
            f"{cfg.num_key_value_heads}"
        )
