"""A Llama-family decoder for the compile pipeline.

Built from a Hugging Face ``config.json`` (file or folder) or a named preset (:data:`PRESETS`). Weights are
random by default (compiled code does not depend on their values; the seed makes them reproducible across
processes) or loaded from ``*.safetensors`` in a folder. The backbone (:class:`LlamaModel`) is what is compiled:
``forward(input_ids, positions) -> hidden_states`` over a flattened batch; the lm head is outside the graph.

Linear layers come from a small factory (:class:`LinearFactory`) so that tensor-parallel versions can be swapped
in later without touching the model code.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from compiler.capture import support_torch_compile
from compiler.distributed import parallel_state as tp_state
from compiler.models.llama_config import (  # noqa: F401 - re-exported: the model's config lives there
    LLAMA_ARCHITECTURES,
    PRESETS,
    LlamaConfig,
    ModelSpecError,
    config_values,
    read_config,
)
from compiler.models.safetensors_io import check_safetensors
from compiler.ops import attention as attn_ops

ATTENTION_OP = torch.ops.cachetool.unified_attention_with_output


def resolve_model(spec: str) -> tuple[LlamaConfig, Path | None]:
    """A preset name, a ``config.json`` path, or a HF folder → (config, folder with weights or None); the
    weights' headers are checked (a corrupt file fails here, before anything is built or written)."""
    cfg, folder = read_config(spec)
    if folder is not None:
        weights = sorted(folder.glob("*.safetensors"))
        for file in weights:
            try:
                check_safetensors(file)
            except (OSError, ValueError) as exc:
                raise ModelSpecError(f"cannot read weights {file}: {exc}") from None
        if not weights:
            folder = None
    return cfg, folder


# ---------------------------------------------------------------------- building blocks


class LinearFactory(Protocol):
    def __call__(self, in_features: int, out_features: int, *, bias: bool, role: str) -> nn.Module: ...


def default_linear(in_features: int, out_features: int, *, bias: bool, role: str) -> nn.Module:
    """``role`` is one of ``qkv``, ``o``, ``gate_up``, ``down``: a tensor-parallel factory would make
    column-parallel layers for ``qkv``/``gate_up`` and row-parallel ones for ``o``/``down``."""
    return nn.Linear(in_features, out_features, bias=bias)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x32 * self.weight.float()).to(dtype)


def _inv_freq(cfg: LlamaConfig) -> torch.Tensor:
    d = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    rs = cfg.rope_scaling or {}
    if rs.get("rope_type", rs.get("type")) == "llama3":
        factor = rs["factor"]
        low, high = rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        low_wl, high_wl = old / low, old / high
        wl = 2 * math.pi / inv
        smooth = (old / wl - low) / (high - low)
        scaled = torch.where(wl > low_wl, inv / factor, inv)
        mid = (1 - smooth) * inv / factor + smooth * inv
        is_mid = (wl <= low_wl) & (wl >= high_wl)
        inv = torch.where(is_mid, mid, scaled)
    return inv


class RotaryEmbedding(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.head_dim = cfg.head_dim
        self.register_buffer("inv_freq", _inv_freq(cfg), persistent=False)

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float()[:, None] * self.inv_freq[None, :]  # type: ignore[index]  # baseline (issue 46)
        cos, sin = freqs.cos(), freqs.sin()
        return self._rotate(q, cos, sin), self._rotate(k, cos, sin)

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        t = x.shape[0]
        x = x.view(t, -1, self.head_dim).float()
        x1, x2 = x.chunk(2, dim=-1)
        c, s = cos[:, None, :], sin[:, None, :]
        out = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
        return out.flatten(1)


class LlamaAttention(nn.Module):
    def __init__(self, cfg: LlamaConfig, layer_name: str, linear: LinearFactory) -> None:
        super().__init__()
        self.q_size = cfg.num_attention_heads * cfg.head_dim
        self.kv_size = cfg.num_key_value_heads * cfg.head_dim
        self.qkv_proj = linear(cfg.hidden_size, self.q_size + 2 * self.kv_size, bias=False, role="qkv")
        self.o_proj = linear(self.q_size, cfg.hidden_size, bias=False, role="o")
        # This rank's heads (all of them at TP size 1); the layers above take the full sizes.
        from compiler.models.parallel_layers import local_heads

        self.num_heads, self.num_kv_heads = local_heads(cfg)
        self.q_size, self.kv_size = self.num_heads * cfg.head_dim, self.num_kv_heads * cfg.head_dim
        self.rotary = RotaryEmbedding(cfg)
        self.layer_name = layer_name
        attn_ops.register_layer(layer_name, cfg.head_dim)

    def forward(self, positions: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        qkv = self.qkv_proj(x)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q, k = self.rotary(positions, q, k)
        q, k = q.to(x.dtype), k.to(x.dtype)
        out = torch.empty_like(q)
        ATTENTION_OP(q, k, v.contiguous(), out, self.layer_name)
        return self.o_proj(out)


class LlamaMLP(nn.Module):
    def __init__(self, cfg: LlamaConfig, linear: LinearFactory) -> None:
        super().__init__()
        self.inter = cfg.intermediate_size // tp_state.get_tp_size()  # this rank's share of gate and up
        self.gate_up_proj = linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False, role="gate_up")
        self.down_proj = linear(cfg.intermediate_size, cfg.hidden_size, bias=False, role="down")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split([self.inter, self.inter], dim=-1)
        return self.down_proj(nn.functional.silu(gate) * up)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig, index: int, linear: LinearFactory) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = LlamaAttention(cfg, f"model.layers.{index}.self_attn", linear)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = LlamaMLP(cfg, linear)

    def forward(self, positions: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        h = x + self.self_attn(positions, self.input_layernorm(x))
        return h + self.mlp(self.post_attention_layernorm(h))


@support_torch_compile(dynamic_arg_dims={"input_ids": 0, "positions": 0})
class LlamaModel(nn.Module):
    """The compiled backbone: ``(input_ids [T], positions [T]) -> hidden_states [T, hidden]``."""

    def __init__(self, cfg: LlamaConfig, linear: LinearFactory = default_linear) -> None:
        super().__init__()
        self.config = cfg
        if tp_state.get_tp_size() > 1:
            from compiler.models.parallel_layers import VocabParallelEmbedding

            self.embed_tokens = VocabParallelEmbedding(cfg.vocab_size, cfg.hidden_size)
        else:
            self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)  # type: ignore[assignment]  # baseline (issue 46)
        self.layers = nn.ModuleList(LlamaDecoderLayer(cfg, i, linear) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(positions, x)
        return self.norm(x)

    @property
    def layer_names(self) -> list[str]:
        return [layer.self_attn.layer_name for layer in self.layers]  # type: ignore[misc,union-attr]  # baseline (issue 46)


class LlamaForCausalLM(nn.Module):
    """Backbone plus lm head; the head runs eagerly, on the last token of each sequence only."""

    def __init__(self, cfg: LlamaConfig, linear: LinearFactory = default_linear) -> None:
        super().__init__()
        self.config = cfg
        self.model = LlamaModel(cfg, linear)
        if tp_state.get_tp_size() > 1:
            from compiler.models.parallel_layers import ParallelLMHead

            self.lm_head = ParallelLMHead(cfg.vocab_size, cfg.hidden_size)  # gathers the logits of every rank
        else:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)  # type: ignore[assignment]  # baseline (issue 46)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids, positions)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)

    # ------------------------------------------------------------------ weights
    @torch.no_grad()
    def init_random(self, seed: int = 0) -> None:
        """Deterministic random weights (same seed, same values in every process on a device type)."""
        gens: dict[torch.device, torch.Generator] = {}
        for name, p in sorted(self.named_parameters(), key=lambda kv: kv[0]):
            if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
                p.fill_(1.0)
                continue
            gen = gens.get(p.device)
            if gen is None:  # generate on the parameter's device: fast for 8B models on a GPU
                gen = gens[p.device] = torch.Generator(device=p.device).manual_seed(seed)
            if hasattr(p, "weight_loader"):  # tensor-parallel: draw the full (TP=1) tensor, keep this rank's shard
                from compiler.models.parallel_layers import full_shape, load_full_weight

                full = torch.empty(full_shape(p), dtype=p.dtype, device=p.device).normal_(0.0, 0.02, generator=gen)
                load_full_weight(p, full)
            else:
                p.normal_(0.0, 0.02, generator=gen)

    @torch.no_grad()
    def load_safetensors(self, folder: Path) -> int:
        """Load HF-named weights (``q/k/v_proj`` and ``gate/up_proj`` are stacked). Returns tensors loaded."""
        from compiler.models.parallel_layers import full_shape, load_full_weight
        from compiler.models.safetensors_io import iter_safetensors

        params = dict(self.named_parameters())
        fulls: dict[str, torch.Tensor] = {}  # tensor-parallel parameters: the full tensors, sharded at the end
        stacked = {
            "q_proj": ("qkv_proj", 0),
            "k_proj": ("qkv_proj", 1),
            "v_proj": ("qkv_proj", 2),
            "gate_proj": ("gate_up_proj", 0),
            "up_proj": ("gate_up_proj", 1),
        }
        cfg = self.config
        q, kv, inter = (
            cfg.num_attention_heads * cfg.head_dim,
            cfg.num_key_value_heads * cfg.head_dim,
            cfg.intermediate_size,
        )
        offsets = {"qkv_proj": [(0, q), (q, kv), (q + kv, kv)], "gate_up_proj": [(0, inter), (inter, inter)]}
        n = 0
        loaded: set[tuple[str, int | None]] = set()
        for file in sorted(folder.glob("*.safetensors")):
            try:
                for name, tensor in iter_safetensors(file):
                    if "rotary_emb.inv_freq" in name:
                        continue
                    target, shard = name, None
                    for src, (dst, idx) in stacked.items():
                        if f".{src}." in name:
                            target, shard = name.replace(f".{src}.", f".{dst}."), idx
                            break
                    if target not in params:
                        if target == "lm_head.weight" and cfg.tie_word_embeddings:
                            continue
                        raise ModelSpecError(f"unexpected weight {name} in {file.name}")
                    p = params[target]
                    if hasattr(p, "weight_loader"):
                        p = fulls.setdefault(target, torch.zeros(full_shape(p), dtype=p.dtype))  # type: ignore[assignment]  # baseline (issue 46)
                    if shard is not None:
                        start, size = offsets[target.rsplit(".", 2)[-2]][shard]
                        p = p[start : start + size]  # type: ignore[assignment]  # baseline (issue 46)
                    if tuple(tensor.shape) != tuple(p.shape):
                        raise ModelSpecError(
                            f"weight {name} in {file.name} has shape {tuple(tensor.shape)}; "
                            f"the model config needs {tuple(p.shape)}"
                        )
                    p.copy_(tensor.to(p.dtype))
                    loaded.add((target, shard))
                    n += 1
            except (OSError, ValueError, RuntimeError) as exc:
                if isinstance(exc, ModelSpecError):
                    raise
                raise ModelSpecError(f"cannot read weights {file}: {exc}") from None
        missing = [name for name in params if not all((name, s) in loaded for s in _shards(name))]
        if missing:
            raise ModelSpecError(
                f"weights missing in {folder}: {', '.join(missing[:3])}"
                + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
            )
        for target, full in fulls.items():
            load_full_weight(params[target], full)
        return n


def _shards(param_name: str) -> tuple[int | None, ...]:
    """The checkpoint tensors a parameter is stacked from: q/k/v into ``qkv_proj``, gate/up into ``gate_up_proj``."""
    if ".qkv_proj." in param_name:
        return (0, 1, 2)
    if ".gate_up_proj." in param_name:
        return (0, 1)
    return (None,)


def build_model(
    spec: str,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    seed: int = 0,
    linear: LinearFactory = default_linear,
) -> LlamaForCausalLM:
    cfg, folder = resolve_model(spec)
    device = torch.device(device)
    if linear is default_linear and tp_state.get_tp_size() > 1:
        from compiler.models.parallel_layers import tp_linear_factory

        linear = tp_linear_factory(cfg)
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    prev_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # build in the target dtype: no fp32 copy of an 8B model on the GPU
    try:
        with torch.device(device):
            model = LlamaForCausalLM(cfg, linear)
    finally:
        torch.set_default_dtype(prev_dtype)
    model.to(dtype=dtype)
    # The rotary inverse frequencies stay float32 (as in HF).
    for mod in model.modules():
        if isinstance(mod, RotaryEmbedding):
            mod.inv_freq = mod.inv_freq.float()
    if folder is not None:
        model.load_safetensors(folder)
    else:
        model.init_random(seed)
    model.eval()
    return model


def model_config_values(model: LlamaForCausalLM) -> dict[str, Any]:
    """What of the model config changes the compiled code (hashed into the ``config`` factor)."""
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    return config_values(model.config, dtype, tp_state.parallel_config_values())
