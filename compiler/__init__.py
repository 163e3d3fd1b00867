"""compiler: a vLLM-style torch.compile pipeline with hashed, reusable, per-rank caches.

See docs/compiler.md. Public entry points: :class:`compiler.config.CompilationConfig`,
:func:`compiler.capture.support_torch_compile`, :class:`compiler.runner.ModelRunner`,
:mod:`compiler.cache_key` (``local_env_factors``, ``local_compiler_factors``, ``factor_hash``).
"""

from compiler.config import (
    CompilationConfig,
    CompilationMode,
    ConfigError,
    CUDAGraphMode,
    DynamicShapesConfig,
    DynamicShapesType,
)

__all__ = [
    "CompilationConfig",
    "CompilationMode",
    "ConfigError",
    "CUDAGraphMode",
    "DynamicShapesConfig",
    "DynamicShapesType",
]
