"""The environment variables the vLLM engine reads beyond cachetool's registry (``Engine.variables``; README's
configuration reference documents each)."""

from __future__ import annotations

from cachetool.engines.vllm import jit_caches
from cachetool.envs import EnvVar

__all__ = ["CACHE_ROOT", "PYTHON", "VARIABLES"]

PYTHON = EnvVar(
    "CACHETOOL_VLLM_PYTHON", None, "the Python interpreter that runs vLLM for --engine vllm; default this one"
)
CACHE_ROOT = EnvVar(
    "VLLM_CACHE_ROOT", None, "vLLM's cache root (--engine vllm's default cache root); default ~/.cache/vllm", True
)
TRITON_CACHE_DIR = EnvVar(
    "TRITON_CACHE_DIR",
    None,
    "Triton's kernel cache; a vLLM server reads the root's "
    "triton_cache/ only through it (check names it when it is missing)",
    True,
)
VARIABLES = (PYTHON, CACHE_ROOT, TRITON_CACHE_DIR, *jit_caches.VARIABLES)
