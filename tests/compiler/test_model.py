"""The Llama model, the attention op and the runner, eagerly (mode 0). No compilation."""

from __future__ import annotations

import torch

from compiler.config import CompilationConfig
from compiler.forward_context import AttentionMetadata, ForwardContext, set_forward_context
from compiler.models.llama import PRESETS, build_model, resolve_model
from compiler.runner import ModelRunner
from tests.hf_folders import write_hf_folder


def test_presets_shapes() -> None:
    cfg = PRESETS["llama-3.2-1b"]
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim) == (2048, 16, 8, 64)
    assert PRESETS["llama-3.1-8b"].num_hidden_layers == 32
    assert 2 <= PRESETS["tiny"].num_hidden_layers <= 4


def test_kv_cache_decode_matches_full_recompute() -> None:
    """Prefill then decode token by token through the KV cache gives the logits of a full forward."""
    runner = ModelRunner("tiny", "cpu", CompilationConfig(mode=0))
    model = runner.model
    tokens = torch.randint(1, 500, (12,), generator=torch.Generator().manual_seed(3)).tolist()
    seq = runner.add_sequence(tokens[:8])
    logits = [runner.step([seq]).logits[0]]
    for t in tokens[8:]:
        seq.tokens.append(t)
        logits.append(runner.step([seq]).logits[0])
    with torch.no_grad():  # no forward context: plain causal attention over the whole sequence
        hidden = model(torch.tensor(tokens), torch.arange(len(tokens)))
        full = model.compute_logits(hidden).float()
    for i, row in enumerate(logits):
        torch.testing.assert_close(row, full[7 + i], rtol=1e-4, atol=1e-5)


def test_mixed_batch_equals_separate() -> None:
    runner = ModelRunner("tiny", "cpu", CompilationConfig(mode=0))
    a = runner.add_sequence([5, 6, 7, 8])
    b = runner.add_sequence([9, 10])
    both = runner.step([a, b]).logits
    runner.free(a), runner.free(b)
    c = runner.add_sequence([5, 6, 7, 8])
    torch.testing.assert_close(runner.step([c]).logits[0], both[0], rtol=1e-5, atol=1e-6)


def test_hf_folder_with_safetensors(tmp_path) -> None:
    src = write_hf_folder(tmp_path, seed=7)
    parsed, folder = resolve_model(str(tmp_path))
    assert folder == tmp_path and parsed.hidden_size == PRESETS["tiny"].hidden_size
    loaded = build_model(str(tmp_path))
    ids, pos = torch.tensor([1, 2, 3]), torch.arange(3)
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids, pos), src(ids, pos))
    # config.json alone: random weights, same architecture
    assert resolve_model(str(tmp_path / "config.json"))[1] is None


def test_linear_factory_roles() -> None:
    roles = []

    def factory(i: int, o: int, *, bias: bool, role: str) -> torch.nn.Module:
        roles.append(role)
        return torch.nn.Linear(i, o, bias=bias)

    from compiler.models.llama import LlamaForCausalLM

    LlamaForCausalLM(PRESETS["tiny"], factory)
    assert set(roles) == {"qkv", "o", "gate_up", "down"}


def test_forward_context_metadata_shape() -> None:
    meta = AttentionMetadata([0, 3, 4], [3, 5], [0, 256], torch.tensor([0, 1, 2, 260]))
    assert meta.num_seqs == 2 and meta.num_tokens == 4
    with set_forward_context(ForwardContext(meta, {})):
        from compiler.forward_context import get_forward_context

        assert get_forward_context().attn_metadata is meta
