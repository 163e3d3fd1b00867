"""Compilation configuration: ``CompilationConfig`` and its parts, parsing, validation and hashing.

Field names follow vLLM's ``CompilationConfig`` so that users can carry their ``-cc`` flags over:

- ``mode``: 0 no compilation, 1 stock ``torch.compile``, 2 Dynamo traced once (no Inductor),
  3 this pipeline's piecewise Inductor backend with a hashed, reusable cache (the default);
- ``cache_dir``; ``compile_cache_save_format`` (``binary`` | ``unpacked``, default from the environment);
- ``splitting_ops`` (default: the attention ops; ``[]`` means one piece, no split);
- ``compile_sizes``; ``cudagraph_mode``; ``cudagraph_capture_sizes``; ``max_cudagraph_capture_size``;
- ``dynamic_shapes_config`` {``type``: backed | unbacked | backed_size_oblivious, ``evaluate_guards``}.

A config is built from a dict (:meth:`CompilationConfig.from_dict`), JSON (:meth:`from_json`) and dot-notation
overrides (:func:`parse_overrides`, ``dynamic_shapes_config.type=unbacked``). Any unknown key or bad value raises
:class:`ConfigError` with a one-line message. :meth:`CompilationConfig.compute_hash` is opt-out: every field is
hashed unless named in ``CompilationConfig.HASH_EXCLUDE``, so a newly added field cannot be forgotten.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from compiler import envs
from compiler.errors import CONFIG, CompilerError

ATTENTION_OPS: tuple[str, ...] = ("cachetool.unified_attention_with_output",)
"""Default ``splitting_ops``: the attention custom op(s) registered by :mod:`compiler.ops.attention`."""


DEFAULT_MAX_CAPTURE_SIZE = 512
"""``max_cudagraph_capture_size`` when neither it nor ``cudagraph_capture_sizes`` is given (vLLM's default)."""


def default_capture_sizes(max_size: int = DEFAULT_MAX_CAPTURE_SIZE) -> list[int]:
    """vLLM's capture-size rule: ``[1, 2, 4] + range(8, 256, 8) + range(256, max_size + 1, 16)``, cut at
    ``max_size``. The one definition of the rule: config validation and the CUDA-graph dispatcher use it."""
    if max_size < 0:
        raise ConfigError(f"max_cudagraph_capture_size must be a non-negative integer, got {max_size!r}")
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, max_size + 1, 16))
    return [s for s in sizes if s <= max_size]


class ConfigError(CompilerError, ValueError):
    """A bad compilation config: unknown key, wrong type or value, bad JSON. The message is one line. Also a
    ValueError: a bad value, for callers that catch those."""

    kind = CONFIG


class CompilationMode(enum.IntEnum):
    NONE = 0
    STOCK_TORCH_COMPILE = 1
    DYNAMO_TRACE_ONCE = 2
    PIECEWISE = 3  # vLLM's VLLM_COMPILE


class CUDAGraphMode(enum.Enum):
    """CUDA graph modes, as in vLLM. Only ``NONE`` runs on the CPU; the others are validated here and
    implemented by a CUDA-graph wrapper around the piecewise runnables (see :mod:`compiler.piecewise_backend`)."""

    NONE = "NONE"
    PIECEWISE = "PIECEWISE"
    FULL = "FULL"
    FULL_DECODE_ONLY = "FULL_DECODE_ONLY"
    FULL_AND_PIECEWISE = "FULL_AND_PIECEWISE"

    def has_piecewise(self) -> bool:
        return self in (CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL_AND_PIECEWISE)

    def has_full(self) -> bool:
        return self in (CUDAGraphMode.FULL, CUDAGraphMode.FULL_DECODE_ONLY, CUDAGraphMode.FULL_AND_PIECEWISE)


class DynamicShapesType(str, enum.Enum):
    BACKED = "backed"
    UNBACKED = "unbacked"
    BACKED_SIZE_OBLIVIOUS = "backed_size_oblivious"


@dataclass
class DynamicShapesConfig:
    type: DynamicShapesType = DynamicShapesType.BACKED
    """How the token dimension is made dynamic: ``backed`` (``mark_dynamic``; guards dropped after the one
    compile), ``unbacked`` (``mark_unbacked``: no 0/1 specialisation at all), ``backed_size_oblivious``
    (backed, but size-oblivious reasoning so that 0/1 are not specialised)."""
    evaluate_guards: bool = False
    """Keep Dynamo's guards and fail (instead of recompiling) when one does not hold; also fail at compile
    time if tracing added a guard on the dynamic token dimension."""

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type.value, "evaluate_guards": self.evaluate_guards}


def _default_save_format() -> str:
    return envs.compile_cache_save_format()


@dataclass
class CompilationConfig:
    mode: CompilationMode = CompilationMode.PIECEWISE
    cache_dir: str = ""
    """Explicit compile cache directory (the ``{hash10}`` level is still added below it). Empty: from
    ``CACHETOOL_CACHE_ROOT``. Not hashed."""
    compile_cache_save_format: str = field(default_factory=_default_save_format)
    splitting_ops: list[str] | None = None
    """Ops at which the graph is split (``ns.op`` names). ``None``: the attention ops. ``[]``: no split."""
    compile_sizes: list[int | str] = field(default_factory=list)
    """Extra token counts compiled for a static shape (``"cudagraph_capture_sizes"`` expands to those)."""
    cudagraph_mode: CUDAGraphMode | None = None
    """``None`` (unset): resolved per device by :func:`compiler.cudagraph_dispatcher.resolve_cudagraph_mode`
    (``FULL_AND_PIECEWISE`` on CUDA as in vLLM, ``NONE`` on the CPU)."""
    cudagraph_capture_sizes: list[int] | None = None
    max_cudagraph_capture_size: int | None = None
    dynamic_shapes_config: DynamicShapesConfig = field(default_factory=DynamicShapesConfig)

    # Fields that do not change compiled code. Everything else is hashed (opt-out).
    HASH_EXCLUDE = frozenset({"cache_dir", "compile_cache_save_format"})

    # ------------------------------------------------------------------ construction
    def __post_init__(self) -> None:
        self._validate()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CompilationConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"compilation config must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown compilation config key {unknown[0]!r} (known: {', '.join(sorted(known))})")
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            kwargs[key] = _coerce_field(key, value)
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text: str | None) -> CompilationConfig:
        return cls.from_cli(text)

    @classmethod
    def from_cli(cls, json_text: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> CompilationConfig:
        """``--compilation-config JSON`` then ``-cc.a.b=v`` overrides on top."""
        data: dict[str, Any] = {}
        if json_text is not None and json_text.strip():
            try:
                data = json.loads(json_text)
            except json.JSONDecodeError as exc:
                raise ConfigError(
                    f"compilation config is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
                ) from None
            if not isinstance(data, dict):
                raise ConfigError(f"compilation config must be a JSON object, got {type(data).__name__}")
        return cls.from_dict(apply_overrides(data, overrides))

    # ------------------------------------------------------------------ validation
    def _validate(self) -> None:
        if self.compile_cache_save_format not in ("binary", "unpacked"):
            raise ConfigError(
                f"compile_cache_save_format must be 'binary' or 'unpacked', got {self.compile_cache_save_format!r}"
            )
        if self.splitting_ops is not None:
            if not isinstance(self.splitting_ops, list) or not all(
                isinstance(s, str) and s for s in self.splitting_ops
            ):
                raise ConfigError("splitting_ops must be a list of op names such as 'ns.op'")
        # Resolve capture sizes the way vLLM does: explicit sizes win (the max must agree), else the rule up to
        # the max; either way the max becomes the largest size, so that to_dict() round-trips.
        if self.cudagraph_capture_sizes is not None:
            sizes = sorted(set(self.cudagraph_capture_sizes))
            if self.max_cudagraph_capture_size is not None:
                if sizes and self.max_cudagraph_capture_size != sizes[-1]:
                    raise ConfigError(
                        f"max_cudagraph_capture_size ({self.max_cudagraph_capture_size}) must equal the largest "
                        f"of cudagraph_capture_sizes ({sizes[-1]})"
                    )
            self.cudagraph_capture_sizes = sizes
            self.max_cudagraph_capture_size = sizes[-1] if sizes else 0
        elif self.max_cudagraph_capture_size is not None:
            self.cudagraph_capture_sizes = default_capture_sizes(self.max_cudagraph_capture_size)
            self.max_cudagraph_capture_size = self.cudagraph_capture_sizes[-1] if self.cudagraph_capture_sizes else 0
        if self.cudagraph_mode is not None and self.cudagraph_mode != CUDAGraphMode.NONE:
            if self.mode != CompilationMode.PIECEWISE and self.cudagraph_mode.has_piecewise():
                raise ConfigError(f"cudagraph_mode={self.cudagraph_mode.value} needs mode=3 (piecewise)")
            if self.cudagraph_mode.has_piecewise() and self.splitting_ops == []:
                raise ConfigError(
                    f"cudagraph_mode={self.cudagraph_mode.value} needs splitting_ops (piecewise graphs); "
                    "use FULL with splitting_ops=[]"
                )
        expanded: list[int | str] = []
        for s in self.compile_sizes:
            if s == "cudagraph_capture_sizes":
                expanded.append(s)
            elif isinstance(s, int) and not isinstance(s, bool) and s > 0:
                expanded.append(s)
            else:
                raise ConfigError(
                    f"compile_sizes entries must be positive integers or 'cudagraph_capture_sizes', got {s!r}"
                )
        self.compile_sizes = expanded

    # ------------------------------------------------------------------ derived values
    @property
    def resolved_splitting_ops(self) -> list[str]:
        return list(ATTENTION_OPS) if self.splitting_ops is None else list(self.splitting_ops)

    @property
    def resolved_capture_sizes(self) -> list[int]:
        """The CUDA-graph capture sizes, ascending: ``cudagraph_capture_sizes``, else the rule with
        ``max_cudagraph_capture_size`` (default :data:`DEFAULT_MAX_CAPTURE_SIZE`)."""
        if self.cudagraph_capture_sizes is not None:
            return sorted(set(self.cudagraph_capture_sizes))
        m = self.max_cudagraph_capture_size
        return default_capture_sizes(DEFAULT_MAX_CAPTURE_SIZE if m is None else m)

    @property
    def resolved_compile_sizes(self) -> list[int]:
        return resolve_compile_sizes(self.compile_sizes, self.cudagraph_capture_sizes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": int(self.mode),
            "cache_dir": self.cache_dir,
            "compile_cache_save_format": self.compile_cache_save_format,
            "splitting_ops": self.splitting_ops,
            "compile_sizes": list(self.compile_sizes),
            "cudagraph_mode": self.cudagraph_mode.value if self.cudagraph_mode is not None else None,
            "cudagraph_capture_sizes": self.cudagraph_capture_sizes,
            "max_cudagraph_capture_size": self.max_cudagraph_capture_size,
            "dynamic_shapes_config": self.dynamic_shapes_config.to_dict(),
        }

    def hash_values(self) -> dict[str, Any]:
        """The hashed fields (all but :attr:`HASH_EXCLUDE`), with defaults resolved."""
        values = {k: v for k, v in self.to_dict().items() if k not in self.HASH_EXCLUDE}
        values["splitting_ops"] = self.resolved_splitting_ops
        return values

    def compute_hash(self) -> str:
        text = json.dumps(self.hash_values(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def resolve_compile_sizes(compile_sizes: list[int | str], cudagraph_capture_sizes: list[int] | None) -> list[int]:
    """The token counts that get a compile of their own, ascending: ``compile_sizes`` with the entry
    ``"cudagraph_capture_sizes"`` standing for those sizes. Also reads a recorded config (``cache_key_factors.json``),
    where a bad entry raises ``ValueError`` or ``TypeError``."""
    sizes: set[int] = set()
    for s in compile_sizes:
        if s == "cudagraph_capture_sizes":
            sizes.update(int(c) for c in cudagraph_capture_sizes or [])
        else:
            sizes.add(int(s))
    return sorted(sizes)


# ---------------------------------------------------------------------- field coercion


def _enum_value(enum_cls: type[enum.Enum], key: str, value: Any) -> enum.Enum:
    if isinstance(value, enum_cls):
        return value
    if enum_cls is CompilationMode:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ConfigError(f"{key} must be 0, 1, 2 or 3, got {value!r}")
        if isinstance(value, str):
            if value.isdigit():
                value = int(value)
            elif value.upper() in CompilationMode.__members__:
                return CompilationMode[value.upper()]
            else:
                raise ConfigError(f"{key} must be 0, 1, 2 or 3, got {value!r}")
        try:
            return CompilationMode(value)
        except ValueError:
            raise ConfigError(f"{key} must be 0, 1, 2 or 3, got {value!r}") from None
    names = [m.value for m in enum_cls]
    if isinstance(value, str):
        for m in enum_cls:
            if m.value.lower() == value.lower() or m.name.lower() == value.lower():
                return m
    raise ConfigError(f"{key} must be one of {', '.join(names)}, got {value!r}")


def _int_list(key: str, value: Any, allow_none: bool) -> list[int] | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        raise ConfigError(f"{key} must be a list of positive integers, got {value!r}")
    return list(value)


def _coerce_field(key: str, value: Any) -> Any:
    if key == "mode":
        return _enum_value(CompilationMode, key, value)
    if key == "cudagraph_mode":
        return None if value is None else _enum_value(CUDAGraphMode, key, value)
    if key == "cache_dir":
        if not isinstance(value, str):
            raise ConfigError(f"cache_dir must be a string, got {value!r}")
        return value
    if key == "compile_cache_save_format":
        if value not in ("binary", "unpacked"):
            raise ConfigError(f"compile_cache_save_format must be 'binary' or 'unpacked', got {value!r}")
        return value
    if key == "splitting_ops":
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
            raise ConfigError(f"splitting_ops must be a list of op names such as 'ns.op', got {value!r}")
        return list(value)
    if key == "compile_sizes":
        if not isinstance(value, list):
            raise ConfigError(f"compile_sizes must be a list, got {value!r}")
        return list(value)
    if key == "cudagraph_capture_sizes":
        return _int_list(key, value, allow_none=True)
    if key == "max_cudagraph_capture_size":
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"max_cudagraph_capture_size must be a non-negative integer, got {value!r}")
        return value
    if key == "dynamic_shapes_config":
        if isinstance(value, DynamicShapesConfig):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"dynamic_shapes_config must be an object, got {value!r}")
        unknown = sorted(set(value) - {"type", "evaluate_guards"})
        if unknown:
            raise ConfigError(
                f"unknown compilation config key 'dynamic_shapes_config.{unknown[0]}' (known: type, evaluate_guards)"
            )
        kw: dict[str, Any] = {}
        if "type" in value:
            kw["type"] = _enum_value(DynamicShapesType, "dynamic_shapes_config.type", value["type"])
        if "evaluate_guards" in value:
            if not isinstance(value["evaluate_guards"], bool):
                raise ConfigError(
                    f"dynamic_shapes_config.evaluate_guards must be true or false, got {value['evaluate_guards']!r}"
                )
            kw["evaluate_guards"] = value["evaluate_guards"]
        return DynamicShapesConfig(**kw)
    raise ConfigError(f"unknown compilation config key {key!r}")  # pragma: no cover


# ---------------------------------------------------------------------- dot-notation overrides


def _parse_scalar(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b=v`` (a leading ``-cc.``/``cc.``/``--`` is stripped) → (``["a", "b"]``, parsed ``v``)."""
    text = item
    for prefix in ("--compilation-config.", "-cc.", "--cc.", "cc."):
        if text.startswith(prefix):
            text = text[len(prefix) :]
            break
    if "=" not in text:
        raise ConfigError(f"compilation config override must look like key=value, got {item!r}")
    key, raw = text.split("=", 1)
    parts = key.split(".")
    if not all(parts):
        raise ConfigError(f"bad compilation config key in {item!r}")
    return parts, _parse_scalar(raw)


def apply_overrides(data: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    out = json.loads(json.dumps(data))  # deep copy of plain JSON
    for item in overrides:
        parts, value = parse_override(item)
        node = out
        for p in parts[:-1]:
            child = node.get(p)
            if child is None:
                child = node[p] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"compilation config key {p!r} is not an object (in {item!r})")
            node = child
        node[parts[-1]] = value
    return out
