"""The environment variables the torch engine reads beyond cachetool's registry (``Engine.variables``; README's
configuration reference documents each)."""

from __future__ import annotations

from cachetool.envs import EnvVar

__all__ = ["CACHE_KEY_SETTINGS", "ROOT", "VARIABLES"]

ROOT = EnvVar(
    "CACHETOOL_TORCH_CACHE_ROOT",
    None,
    "--engine torch's cache root (its program's TORCHINDUCTOR_CACHE_DIR "
    "is ROOT/inductor, TRITON_CACHE_DIR ROOT/triton); default ~/.cache/cachetool-torch",
)
# Inductor's settings that the machine's build evidence (cachetool.facts.machine.inductor_env) leaves out but its
# FX-graph cache key holds: a warm with one set and a start without it look up other keys, so the engine's env
# factor records them (cachetool.engines.torch.key.env_values)
CACHE_KEY_SETTINGS = (
    EnvVar(
        "TORCHINDUCTOR_VEC_ISA_OK",
        None,
        "Inductor's cpp.vec_isa_ok: in its cache key, so recorded and compared by --engine torch",
        True,
    ),
)
VARIABLES = (ROOT, *CACHE_KEY_SETTINGS)
