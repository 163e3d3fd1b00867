"""What a compiled module needs to know about its deployment: config, model identity, device, rank."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from compiler.config import CompilationConfig
from compiler.layout import DEFAULT_PREFIX


@dataclass
class CompileContext:
    compilation_config: CompilationConfig = field(default_factory=CompilationConfig)
    model_config: dict[str, Any] = field(default_factory=dict)
    """The model config values that change compiled code (hashed into the ``config`` factor)."""
    device: str = "cpu"
    rank: int = 0
    dp_rank: int = 0
    prefix: str = DEFAULT_PREFIX
    key_only: bool = False
    """Compute the cache key but compile nothing, write nothing and run the graph eagerly: a fast way to
    learn the key and the cache folder (tests, preflight, ``diff``)."""
    save_aot_entry: bool | None = None
    """Write the AOT entry after the first call: ``True`` always (a warm), ``False`` never, ``None`` (default) when
    this process compiled something (a start that only loaded writes nothing into the cache)."""
