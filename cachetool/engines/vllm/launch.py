"""What a ``vllm serve`` start is launched with, read without importing vLLM or torch: the key check's fast path.

vLLM's key folder is a deterministic function of the installation (vLLM, torch, the traced source files), the
environment, the flags and the model's ``config.json`` on a given device. A warm records those **launch inputs**
beside the key folder (the ``launch`` factor); a pull computes them for the server's model, flags and environment
in milliseconds. Equal launch inputs (and equal traced files) mean the server computes the warm's folder, so the
pull needs no vLLM. A difference is sorted by what the warm recorded of vLLM's hashing
(:mod:`cachetool.engines.vllm.verdict`): hashed (a miss, named), unhashed (a hit: ``--port``, ``--seed``, an
unhashed variable), or unknown, which alone sends the pull to vLLM itself (``ServerKeyCheck``'s ``key`` child).

Recorded (``factors.launch.values``)::

    {"vllm": "0.32.0", "torch": "2.13.0+cpu", "model": "/models/m", "model_config": "<sha256 of config.json>",
     "flags": [...],             the server's flags without the model and without server-only options
     "env": {NAME: value},       the variables vLLM, torch, Inductor and Triton read (secrets by digest)
     "config_json": {...},       config.json itself (a changed field is named: cachetool.engines.vllm.verdict)
     "server_only_options": {"--port": true, ...}}   vLLM's own list, from the warm (not compared)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from cachetool.engines.vllm import install_facts

# Variables that can change what vLLM, torch, Inductor or Triton compile (names with these prefixes) ...
ENV_PREFIXES = (
    "VLLM_",
    "TORCH",
    "PYTORCH_",
    "INDUCTOR_",
    "TRITON_",
    "CUDA_",
    "ATEN_",
    "OMP_",
    "KMP_",
    "MKL_",
    "LD_PRELOAD",
)
# ... except where a cache or log lives, which cachetool sets itself or which cannot change compiled code
# (vLLM >= 0.29 ignores the same VLLM_ ones; what a release does hash is compared whatever its name: ``hashed``).
ENV_IGNORED = frozenset(
    {
        "VLLM_CACHE_ROOT",
        "VLLM_CONFIG_ROOT",
        "VLLM_ENABLE_V1_MULTIPROCESSING",
        "VLLM_NO_USAGE_STATS",
        "VLLM_DO_NOT_TRACK",
        "VLLM_USAGE_STATS_SERVER",
        "VLLM_LOGGING_PREFIX",
        "VLLM_LOGGING_STREAM",
        "VLLM_LOGGING_CONFIG_PATH",
        "VLLM_LOGGING_COLOR",
        "VLLM_PORT",
        "VLLM_HOST_IP",
        "VLLM_RPC_BASE_PATH",
        "VLLM_API_KEY",
        "VLLM_SERVER_DEV_MODE",
        "TORCHINDUCTOR_CACHE_DIR",
        "TRITON_CACHE_DIR",
        "TRITON_HOME",
        "TORCH_HOME",
        "TRITON_DUMP_DIR",
        "TRITON_OVERRIDE_DIR",
        "CUDA_CACHE_PATH",
        "CUDA_VISIBLE_DEVICES",
        "TORCH_LOGS",
        "TORCH_TRACE",
    }
)
# Variables outside vLLM's compile factors that it reads while it builds its config, where a value can still move
# the config hash, each with what the config takes of its value (two values read alike are the same launch):
# under torch < 2.12 vLLM 0.26-0.32 turn Inductor's asserts on where VLLM_LOGGING_LEVEL is DEBUG
# (vllm/config/compilation.py); VLLM_MODEL_REDIRECT_PATH can map the model to another path. Kept as launch inputs,
# and a difference the reading does not settle is left to vLLM (the key child, a process started with the server's
# environment): vLLM's parser computes its defaults, the compilation config's among them, once per process
# (``_compute_kwargs``, cached), so a warm cannot try another value in its own.
READ_BY_CONFIG: dict[str, Callable[[str | None], object]] = {
    "VLLM_LOGGING_LEVEL": lambda value: (value if value is not None else "INFO").upper() == "DEBUG",
    "VLLM_MODEL_REDIRECT_PATH": lambda value: value or None,
}
SECRET_MARKS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
# Hashed variables whose default vLLM derives from others (vLLM 0.26 hashes VLLM_CONFIG_ROOT and VLLM_XLA_CACHE_PATH,
# folders under HOME or XDG_*): where a release hashes one, what it derives from is compared too.
DERIVED_FROM = {"VLLM_CONFIG_ROOT": ("HOME", "XDG_CONFIG_HOME"), "VLLM_XLA_CACHE_PATH": ("HOME", "XDG_CACHE_HOME")}
# Engine flags a headless start adds and vLLM does not hash (dummy weights, no tokenizer): a server that loads
# its weights and tokenizer is launched as the warm was. Each maps to whether it takes a value.
UNHASHED_ENGINE_OPTIONS = {"--load-format": True, "--skip-tokenizer-init": False, "--no-skip-tokenizer-init": False}
# Server options that can change the engine's arguments: never stripped, and --config (a file of flags) sends
# the check to vLLM.
ENGINE_AFFECTING = ("--config",)


def launch_env(env: Mapping[str, str], hashed: Iterable[str] = ()) -> dict[str, str]:
    """The variables of ``env`` that can reach vLLM's key; a secret-looking one by its digest. ``hashed``: the
    variables the installed vLLM release hashes (its env factor's names, as a warm recorded them): each is kept
    whatever its name (vLLM 0.26-0.28 hash VLLM_API_KEY; every release hashes VERBOSE, NVCC_THREADS, ...), with
    what its value derives from (:data:`DERIVED_FROM`)."""
    hashed = set(hashed)
    sources = {src for name in hashed & DERIVED_FROM.keys() for src in DERIVED_FROM[name]}
    out = {}
    for name in sorted(env):
        if name not in hashed and name not in sources and (not name.startswith(ENV_PREFIXES) or name in ENV_IGNORED):
            continue
        value = env[name]
        if any(mark in name for mark in SECRET_MARKS):
            value = "sha256:" + hashlib.sha256(value.encode()).hexdigest()[:16]
        out[name] = value
    return out


def strip_options(flags: list[str], options: Mapping[str, bool]) -> list[str]:
    """``flags`` without the options in ``options`` (each mapped to whether it takes a value)."""
    out = []
    i = 0
    while i < len(flags):
        name, eq, _ = flags[i].partition("=")
        if name in options:
            i += 1 if (eq or not options[name]) else 2
            continue
        out.append(flags[i])
        i += 1
    return out


def model_config_digest(model: str) -> str | None:
    """sha256 of the model folder's ``config.json`` (None for a hub id or a folder without it)."""
    from cachetool.digests import hexof, sha256_file

    try:
        return hexof(sha256_file(Path(model).expanduser() / "config.json")[0])
    except OSError:
        return None


def read_config_json(model: str) -> dict | None:
    """The model folder's ``config.json`` as JSON (None for a hub id, a missing or unreadable file)."""
    try:
        data = json.loads((Path(model).expanduser() / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@dataclasses.dataclass(frozen=True)
class LaunchInputs:
    vllm: str | None
    torch: str | None
    model: str
    model_config: str | None
    flags: tuple[str, ...]
    env: dict[str, str]
    config_json: dict | None = None  # the config.json itself: a changed one is compared field by field (verdict)

    @classmethod
    def of(
        cls,
        model: str,
        flags: list[str],
        env: Mapping[str, str],
        server_only: Mapping[str, bool],
        hashed: Iterable[str] = (),
    ) -> LaunchInputs:
        """``hashed``: the variables the installed vLLM hashes (:func:`launch_env`)."""
        unhashed = {**{k: v for k, v in server_only.items() if k not in ENGINE_AFFECTING}, **UNHASHED_ENGINE_OPTIONS}
        return cls(
            vllm=install_facts.vllm_version(),
            torch=install_facts.torch_version(),
            model=model,
            model_config=model_config_digest(model),
            flags=tuple(strip_options(flags, unhashed)),
            env=launch_env(env, hashed),
            config_json=read_config_json(model),
        )

    def to_values(self, server_only: Mapping[str, bool]) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["flags"] = list(self.flags)
        d["server_only_options"] = dict(server_only)
        return d

    def differences(self, recorded: Mapping[str, Any]) -> list[str]:
        """The names of the launch inputs that differ from ``recorded`` (``env.NAME`` per variable); a flag file
        (``--config``) is a difference in itself: its content is not read here."""
        if any(f.partition("=")[0] in ENGINE_AFFECTING for f in self.flags):
            return ["flags (--config)"]
        out = [
            name
            for name in ("vllm", "torch", "model", "model_config", "flags")
            if recorded.get(name) != (list(self.flags) if name == "flags" else getattr(self, name))
        ]
        renv = recorded.get("env") if isinstance(recorded.get("env"), dict) else {}
        out += [f"env.{n}" for n in sorted(set(renv) | set(self.env)) if renv.get(n) != self.env.get(n)]  # type: ignore[arg-type,union-attr]  # baseline (issue 46)
        return out


def traced_digests(ids: list[str], python: str) -> dict[str, str | None]:
    """sha256 of each traced file id (relative to a ``sys.path`` entry of ``python``, or absolute) as this
    installation has it; None where it is not here. The ids are the warm's (``cachetool_vllm_probe.file_id``)."""
    from cachetool.digests import hexof, sha256_file

    roots = [Path(p or ".") for p in install_facts.interpreter_path(python)]
    out: dict[str, str | None] = {}
    for fid in ids:
        cands = [Path(fid)] if Path(fid).is_absolute() else [r / fid for r in roots]
        found = next((c for c in cands if c.is_file()), None)
        try:
            out[fid] = hexof(sha256_file(found)[0]) if found else None
        except OSError:
            out[fid] = None
    return out
