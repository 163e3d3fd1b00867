"""The cache key: four factor hashes (env, config, code, compiler) and the ``hash10`` folder name.

``hash10`` is the first 10 hex digits of sha256 over the four factor hashes. Each factor's hash is
:func:`factor_hash` of its ``values`` (canonical JSON), and both are written to ``cache_key_factors.json``
(format in docs/ARCHITECTURE.md) so that a mismatch can be explained factor by factor.

Public API used by ``cachetool`` (preflight, diff): :func:`local_env_factors`,
:func:`local_compiler_factors`, :func:`factor_hash`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import CodeType
from typing import Any

import torch

from compiler import envs

SCHEMA = 1
FACTOR_NAMES = ("env", "config", "code", "compiler")
FACTORS_FILE = "cache_key_factors.json"

# Inductor config entries that change nothing in generated code (workers, logging, timeouts).
_INDUCTOR_CONFIG_EXCLUDE_WORDS = ("worker", "log", "timeout", "compile_threads", "cache_dir", "trace.",
                                  "vec_isa_ok")  # vec_isa_ok only skips a build check of the detected ISA


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)


def factor_hash(values: dict[str, Any]) -> str:
    """sha256 hex of the canonical JSON of a factor's ``values``."""
    return hashlib.sha256(canonical_json(values).encode()).hexdigest()


def combine(factor_hashes: dict[str, str]) -> str:
    """``hash10``: first 10 hex of sha256 over the four factor hashes, in the fixed order."""
    text = "|".join(f"{name}:{factor_hashes[name]}" for name in FACTOR_NAMES)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


# ---------------------------------------------------------------------- env

def local_env_factors() -> dict[str, Any]:
    """Environment variables and process settings that change compiled code."""
    values: dict[str, Any] = dict(envs.env_factor_values())
    values["python"] = f"{sys.version_info.major}.{sys.version_info.minor}"
    return values


# ---------------------------------------------------------------------- compiler

@functools.lru_cache(maxsize=1)
def _torch_key() -> str:
    try:
        from torch._inductor.codecache import torch_key

        key = torch_key()
        return key.hex() if isinstance(key, bytes) else str(key)
    except Exception:  # pragma: no cover - older/newer torch
        return f"{torch.__version__}+{torch.version.git_version}"


@functools.lru_cache(maxsize=1)
def _triton_version() -> str | None:
    try:
        import triton  # type: ignore[import-not-found]

        return str(triton.__version__)
    except Exception:
        return None


def _triton_key() -> str | None:
    try:
        from torch._inductor.runtime.triton_compat import triton_key  # type: ignore[attr-defined]

        return str(triton_key())
    except Exception:
        try:
            from triton.compiler.compiler import triton_key  # type: ignore[import-not-found]

            return str(triton_key())
        except Exception:
            return None


# Inductor settings the pipeline applies while it compiles and loads (see :func:`inductor_patches`).
# ``cpp_cache_precompile_headers``: the precompiled header lives in Inductor's *global* default cache dir, not in
# the redirected one, and the .so keys depend on it: a hot start on a fresh machine would run g++ again.
PIPELINE_INDUCTOR_PATCHES: dict[str, Any] = {"cpp_cache_precompile_headers": False}


def inductor_patches() -> dict[str, Any]:
    """:data:`PIPELINE_INDUCTOR_PATCHES` restricted to the keys this torch version has."""
    import torch._inductor.config as inductor_config

    return {k: v for k, v in PIPELINE_INDUCTOR_PATCHES.items() if hasattr(inductor_config, k)}


def inductor_config_values() -> dict[str, Any]:
    """The Inductor config as the pipeline compiles with it (its patches applied)."""
    import torch._inductor.config as inductor_config

    try:
        with inductor_config.patch(inductor_patches()):
            cfg = inductor_config.save_config_portable()
    except Exception:  # pragma: no cover
        cfg = {}
    return {k: v for k, v in cfg.items() if not any(w in k for w in _INDUCTOR_CONFIG_EXCLUDE_WORDS)}


def local_compiler_factors(device: str) -> dict[str, Any]:
    """Torch build key, Triton, device name/capability, CUDA version and Inductor config for ``device``."""
    dev = torch.device(device)
    values: dict[str, Any] = {
        "torch": torch.__version__,
        "torch_git": torch.version.git_version,
        "torch_key": _torch_key(),
        "device_type": dev.type,
    }
    if dev.type == "cuda":
        idx = dev.index if dev.index is not None else 0
        values["device"] = torch.cuda.get_device_name(idx)
        values["capability"] = ".".join(map(str, torch.cuda.get_device_capability(idx)))
        values["cuda"] = torch.version.cuda
        values["triton"] = _triton_version()
        values["triton_key"] = _triton_key()
    else:
        values["device"] = f"cpu-{platform.machine()}"
        values["capability"] = torch.backends.cpu.get_cpu_capability()
    values["inductor_config"] = factor_hash(inductor_config_values())
    return values


# ---------------------------------------------------------------------- code

def _site_roots() -> list[str]:
    roots = {p for p in sys.path if p and os.path.isdir(p)}
    return sorted((os.path.realpath(p) for p in roots), key=len, reverse=True)


def file_id(path: str) -> str | None:
    """A path-independent identity for a traced file: its module name where one is loaded from it,
    else the path relative to the ``sys.path`` entry that holds it, else its base name. ``None`` for
    pseudo-files (``<eval_with_key>``, ``<string>``)."""
    if not path or path.startswith("<") or not os.path.isfile(path):
        return None
    real = os.path.realpath(path)
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if f and os.path.realpath(f) == real:
            return f"module:{name}"
    for root in _site_roots():
        if real.startswith(root + os.sep):
            return "path:" + os.path.relpath(real, root).replace(os.sep, "/")
    return "file:" + os.path.basename(real)


def traced_files(codes: Iterable[CodeType]) -> list[str]:
    files = {c.co_filename for c in codes}
    return sorted(f for f in files if file_id(f) is not None)


def code_factors(files: Iterable[str]) -> dict[str, str]:
    """``{file id: sha256 of content}`` for every traced file."""
    values: dict[str, str] = {}
    for f in files:
        fid = file_id(f)
        if fid is None:
            continue
        values[fid] = hashlib.sha256(Path(f).read_bytes()).hexdigest()
    return values


# ---------------------------------------------------------------------- config

def config_factors(compilation_config: Any, model_config: dict[str, Any]) -> dict[str, Any]:
    return {"compilation_config": compilation_config.hash_values(), "model_config": model_config}


# ---------------------------------------------------------------------- the key

@dataclass(frozen=True)
class CacheKey:
    hash: str
    factors: dict[str, dict[str, Any]]  # name -> {"hash": ..., "values": ...}

    @classmethod
    def from_values(cls, *, env: dict[str, Any], config: dict[str, Any], code: dict[str, Any],
                    compiler: dict[str, Any]) -> CacheKey:
        factors = {name: {"hash": factor_hash(values), "values": values}
                   for name, values in (("env", env), ("config", config), ("code", code), ("compiler", compiler))}
        return cls(hash=combine({n: f["hash"] for n, f in factors.items()}), factors=factors)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "hash": self.hash, "factors": self.factors}

    def write(self, directory: Path) -> Path:
        path = Path(directory) / FACTORS_FILE
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2, sort_keys=True, default=repr) + "\n")
        os.replace(tmp, path)
        return path

    def write_if_changed(self, directory: Path) -> Path | None:
        """:meth:`write`, unless the folder already holds these factors: a hot start writes nothing."""
        path = Path(directory) / FACTORS_FILE
        try:
            if json.loads(path.read_text()) == json.loads(json.dumps(self.to_json(), default=repr)):
                return None
        except (OSError, ValueError):
            pass
        return self.write(directory)

    @classmethod
    def read(cls, path: Path) -> CacheKey:
        data = json.loads(Path(path).read_text())
        return cls(hash=data["hash"], factors=data["factors"])
