"""Shared helpers for the compiler tests (CPU, tiny model).

TORCHINDUCTOR_VEC_ISA_OK=1 is set for this process and every subprocess: it skips Inductor's ~9.5 s per-process
build check of each vector ISA on this box (the detected ISA is trusted). It is excluded from the cache key
(it changes no generated code), so caches warmed with or without it are interchangeable.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

os.environ["TORCHINDUCTOR_VEC_ISA_OK"] = "1"
REPO = Path(__file__).resolve().parents[2]


def hf_config(preset: str = "tiny") -> dict:
    """A Hugging Face ``config.json`` (as a dict) of a preset."""
    from compiler.models.llama import PRESETS

    c = PRESETS[preset]
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": c.vocab_size,
            "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
            "num_hidden_layers": c.num_hidden_layers, "num_attention_heads": c.num_attention_heads,
            "num_key_value_heads": c.num_key_value_heads, "head_dim": c.head_dim, "rms_norm_eps": c.rms_norm_eps,
            "rope_theta": c.rope_theta, "max_position_embeddings": c.max_position_embeddings,
            "tie_word_embeddings": c.tie_word_embeddings}


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


def cli_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["TORCHINDUCTOR_VEC_ISA_OK"] = "1"
    env.pop("CACHETOOL_DISABLE_COMPILE_CACHE", None)
    env.pop("CACHETOOL_COMPILE_CACHE_SAVE_FORMAT", None)
    env.update(extra)
    return env


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cachetool", *args], capture_output=True, text=True,
                          env=env or cli_env(), timeout=timeout, cwd=str(REPO))


def run_json(*args: str, env: dict[str, str] | None = None) -> dict:
    proc = run_cli(*args, "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def warmed_root(tiny_warm: dict) -> tuple[Path, dict, str]:
    """The run's one cold ``cachetool warm`` of the tiny model in a fresh root (a separate process, DEBUG logs;
    ``tiny_warm`` in tests/conftest.py, which also pushed it). Returns (root, the compile's --json object, stderr).
    Shared by every worker: read it, or copy it before a start on it (a load writes into its Inductor cache)."""
    return tiny_warm["root"], tiny_warm["summary"]["compile"], tiny_warm["stderr"]


def copy_warmed(tiny_warm: dict, dest: Path) -> tuple[Path, dict]:
    """A copy of the shared cold warm's root at ``dest`` and its compile --json object with the paths in it
    pointing into the copy (as if that warm had run there): for a module that starts on the root or edits it."""
    shutil.copytree(tiny_warm["root"], dest, symlinks=True)
    text = json.dumps(tiny_warm["summary"]["compile"])
    return dest, json.loads(text.replace(str(tiny_warm["root"].resolve()), str(dest.resolve())))
