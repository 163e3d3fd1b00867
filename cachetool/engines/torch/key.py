"""The facts a ``--engine torch`` cache depends on: recorded by a warm, checked by a pull before any blob, compared
by ``diff`` and by ``check`` (its miss reason).

Inductor's and Triton's caches are content-addressed: an entry is found again only by a process whose torch,
Triton, CUDA, GPU (or CPU vector ISA) and Inductor settings give the same keys. A warm records those facts as the
program had them (the probe's report of the process that compiled) beside the caches, in
``facts/{key}/cache_key_factors.json``::

    {"schema": 1, "engine": "torch", "hash": "<key>",
     "factors": {"compiler": {"hash", "values": {"torch_engine", "torch", "cuda", "triton", "python", "device",
                                                 "gpu", "capability", "cpu_isa", "gpu_driver"}},
                 "env":      {"hash", "values": {VAR: value}},          TORCHINDUCTOR_*, TRITON_*, TORCH_COMPILE_*,
                                                                         PYTORCH_* (cache folders left out; in the
                                                                         cache key's: TORCHINDUCTOR_VEC_ISA_OK)
                 "inductor": {"hash", "values": {setting: value}},      the program's Inductor config in effect,
                                                                         less what Inductor's cache key leaves out
                 "launch":   {"hash": null, "values": {"command", "ready_url", "requests"}}}}   not a fact: shown

The key is the first 16 hex of sha256 over the three facts' hashes: one folder per setting a root was warmed under.
The ``compiler`` values land in the bundle's fingerprint (``torch_engine``, ``cpu_isa``, ``gpu_driver`` among them:
the engine's own fields), which every pull compares first; the ``env`` factor is compared with this machine's
variables by the install preflight (:func:`check_env`); the ``inductor`` settings, which the program may set in its
own code, are what ``check`` and ``diff`` name when a start compiled anyway.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path
from typing import Any

from cachetool import envs
from cachetool.engines.root_names import FACTORS_FILE
from cachetool.engines.torch.layout import FACTS
from cachetool.engines.torch.variables import CACHE_KEY_SETTINGS
from cachetool.errors import PreflightError
from cachetool.facts import machine
from cachetool.facts.factor_compare import compare_factors
from cachetool.layouts.factors import UNSET, Difference, Factors

__all__ = [
    "FACT_NAMES",
    "NOT_CODE",
    "SCHEMA",
    "changes_code",
    "check_env",
    "closest_differences",
    "compiler_values",
    "env_values",
    "key_of",
    "local_compiler_values",
    "local_factors",
    "recorded_factors",
    "write_facts",
]

SCHEMA = 1
ENGINE = "torch"
FACT_NAMES = ("compiler", "env", "inductor")  # what the key hashes, in this order


def _hash(values: Any) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True, separators=(",", ":"), default=repr).encode()).hexdigest()


def _factor(values: dict) -> dict:
    return {"hash": _hash(values), "values": values}


def _engine_facts(device: str) -> dict[str, str | None]:
    """This engine's own fingerprint fields for ``device`` (read here: the program runs on this machine)."""
    gpu = device == "cuda"
    return {
        "torch_engine": str(SCHEMA),
        "cpu_isa": None if gpu else machine.cpu_isa(),
        "gpu_driver": machine.cuda_driver() if gpu else None,
    }


def compiler_values(report: dict) -> dict:
    """The facts of the process that compiled, as its probe reported them (torch, CUDA and Triton as the program's
    interpreter has them), with this engine's own fields."""
    device = report.get("device") or "cpu"
    return {
        "torch": report.get("torch"),
        "cuda": report.get("cuda") if device == "cuda" else None,
        "triton": report.get("triton") if device == "cuda" else None,
        "python": report.get("python"),
        "device": device,
        "gpu": report.get("gpu"),
        "capability": report.get("capability"),
        **_engine_facts(device),
    }


def local_compiler_values(device: str | None) -> dict:
    """The same facts as this machine has them, read without torch (``machine``: files and NVML), for ``device``
    (None: probe for a GPU)."""
    facts = machine.common_facts(device)
    on_gpu = facts["device"] == "cuda"
    return {
        "torch": facts["torch"],
        "cuda": facts["cuda"],
        "triton": facts["triton"] if on_gpu else None,
        "python": ".".join(platform.python_version_tuple()[:2]),
        "device": facts["device"],
        "gpu": facts["gpu"],
        "capability": facts["capability"],
        **_engine_facts(facts["device"]),
    }


def env_values() -> dict[str, str]:
    """The variables Inductor and Triton read their settings from (:func:`machine.inductor_env`), and those of its
    settings in Inductor's cache key that the machine's build evidence leaves out (``TORCHINDUCTOR_VEC_ISA_OK``: a
    warm with it set and a start without it look up other FX-graph keys)."""
    values = machine.inductor_env()
    for var in CACHE_KEY_SETTINGS:
        value = envs.raw(var.name, CACHE_KEY_SETTINGS)
        if value is not None:
            values[var.name] = value
    return dict(sorted(values.items()))


def recorded_factors(report: dict, launch: dict) -> dict:
    """What a warm records for the process that compiled (``report``, its probe's) and the command (``launch``)."""
    return {
        "compiler": _factor(compiler_values(report)),
        "env": _factor(env_values()),
        "inductor": _factor(report.get("inductor") or {}),
        "launch": {"hash": None, "values": launch},
    }


def key_of(factors: dict) -> str:
    return _hash([factors[name]["hash"] for name in FACT_NAMES])[:16]


def write_facts(root: Path, factors: dict) -> tuple[str, bool]:
    """``facts/{key}/cache_key_factors.json`` in ``root``; (the key, whether its folder was there before)."""
    key = key_of(factors)
    folder = Path(root) / FACTS / key
    existed = (folder / FACTORS_FILE).is_file()
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"schema": SCHEMA, "engine": ENGINE, "hash": key, "factors": factors}
    tmp = folder / f".{FACTORS_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True, default=repr))
    os.replace(tmp, folder / FACTORS_FILE)
    return key, existed


def local_factors(device: str) -> Factors:
    """This machine's ``compiler`` and ``env`` facts (the program's Inductor settings need the program)."""
    return Factors({"compiler": _factor(local_compiler_values(device)), "env": _factor(env_values())})


# Recorded variables that change no generated code: whether Inductor's caches are used (a switch, not what they
# hold: its cache key leaves these settings out), where remote caches are, logging, and PyTorch's run-time settings
# (PYTORCH_*: the allocator, NVML, warnings; none is an Inductor setting). diff names them; a pull never refuses on
# them: a false miss (``TORCHINDUCTOR_FX_GRAPH_CACHE=1``, the default, set explicitly, refused a cache check hit).
NOT_CODE = frozenset(
    {
        "TORCHINDUCTOR_FX_GRAPH_CACHE",
        "TORCHINDUCTOR_AUTOGRAD_CACHE",
        "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE",
        "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE",
        "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE",
        "TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE",
        "TORCHINDUCTOR_REDIS_HOST",
        "TORCHINDUCTOR_REDIS_PORT",
        "TORCHINDUCTOR_WORKER_START",
        "TORCHINDUCTOR_WORKER_SUPPRESS_LOGGING",
        "TORCHINDUCTOR_DEBUG",
        "TORCH_COMPILE_DEBUG",
        "TORCH_COMPILE_CPROFILE",
        "TORCHINDUCTOR_PROFILE",
        "TRITON_PRINT_AUTOTUNING",
        "TRITON_DEBUG",
    }
)


def changes_code(name: str) -> bool:
    """Whether the variable ``name`` can change what Inductor or Triton generate (a pull compares only these)."""
    return not name.startswith("PYTORCH_") and name not in NOT_CODE


def code_env(values: dict | None) -> dict | None:
    return None if values is None else {k: v for k, v in values.items() if changes_code(k)}


def check_env(manifest: Any) -> list[str]:
    """The install preflight's check: the Inductor and Triton variables a key folder was warmed with against this
    machine's (a pull runs with the server's environment), those that change generated code only
    (:func:`changes_code`); a :class:`PreflightError` names the first variable that differs in every key folder,
    before any blob."""
    here = Factors({"env": _factor(code_env(env_values()))})  # type: ignore[arg-type]  # baseline (issue 46)
    keys = [k for k in manifest.keys if k.factors is not None and k.factors.values("env") is not None]
    first: list[Difference] = []
    for k in keys:
        warm = Factors({"env": _factor(code_env(k.factors.values("env")))})  # type: ignore[arg-type]  # baseline (issue 46)
        diffs = compare_factors(warm, here, only=("env",))
        if not diffs:
            return ["Inductor and Triton variables"]
        first = first or diffs
    if not first:
        return []
    d = first[0]
    raise PreflightError(
        f"preflight: bundle cannot hit here: variable {d.name} differs: the warm had "
        f"{_shown(d.a)}, this machine {_shown(d.b)} (run the pull with the program's environment)"
    )


def _shown(value: Any) -> str:
    return "it unset" if value == UNSET else repr(value)


def closest_differences(mine: dict, root: Path) -> list[Difference]:
    """How this start's facts differ from those of the closest key folder ``root`` holds (none: the key was
    there, or the root records no facts)."""
    from cachetool.engines.torch.layout import key_folders

    ours = Factors({name: mine[name] for name in FACT_NAMES})
    best: list[Difference] | None = None
    for folder in key_folders(root):
        try:
            doc = json.loads((folder / FACTORS_FILE).read_text())
        except (OSError, ValueError):
            continue
        theirs = Factors.parse(doc.get("factors")) if isinstance(doc, dict) else None
        if theirs is None:
            continue
        diffs = compare_factors(theirs, ours, only=FACT_NAMES)
        if best is None or len(diffs) < len(best):
            best = diffs
    return best or []
