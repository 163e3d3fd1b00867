"""vLLM's cache key, as recorded by a warm and as predicted for a server, and how two of them are told apart.

vLLM names its AOT cache folder by sha256 over ``aot_compile_hash_factors(vllm_config)`` (env factors,
``vllm_config.compute_hash()``, Inductor factors) plus the vLLM version and the compiled forward's identity, taken
from the config *after* the engine has started (the platform and the model runner adjust it). That final config
cannot be had without starting an engine, so cachetool compares what it follows from: the **key inputs** of
:func:`cachetool.engines.vllm.child.key_inputs`, taken from ``EngineArgs.create_engine_config`` before any engine
starts, in a process shaped like ``vllm serve``, plus **Inductor's config as the engine core will read it** (vLLM's
platform sets Inductor variables while it builds the config; with the mega AOT artifact Inductor's config is in
vLLM's key). A warm records them beside the folder vLLM then wrote (``rank_*/cache_key_factors.json``); a pull
computes them for the server's model and flags. Equal inputs (same vLLM, torch, flags, environment, model) give
the folder the warm recorded; any difference is named, down to the config field (the fields a user changes
first: ``hf_config.num_hidden_layers`` before the sizes it implies), the env variable, the Inductor setting or the
traced file. The ``launch`` factor (:mod:`cachetool.engines.vllm.launch`) lets a pull skip asking vLLM when the
server is launched exactly as the warm was.

Recorded factors (``cache_key_factors.json``, the cachetool factor shape)::

    {"schema": 1, "engine": "vllm", "hash": "<the folder's sha256>",
     "factors": {"env":      {"hash", "values": {VAR: value}},          vllm.envs.compile_factors()
                 "config":   {"hash", "values": {sub_config: {"hash", field: value}}},   hf_config field by field
                 "inductor": {"hash", "values": {"inductor.NAME" | "functorch.NAME": value}},
                 "compiler": {"values": {"vllm", "torch", "mega_aot_artifact", "device", "cpu_isa", "gpu", ...}},
                 "code":     {"values": {traced file id: sha256}},
                 "serve":    {"values": {"model": path or id, "flags": [...], "tensor_parallel_size": n}},
                 "launch":   {"values": {"vllm", "torch", "model", "model_config", "flags", "env", ...}},
                 "hashing":  {"values": {"options", "defaults", "flags", "env", "hf_config_hashed"}}}}
"""

from __future__ import annotations

from typing import Any

from cachetool.engines.root_names import FACTORS_FILE  # noqa: F401 - where a warm records them
from cachetool.engines.vllm.server_command import canonical
from cachetool.facts.factor_compare import field_differences, same_json  # the one field-by-field comparison
from cachetool.layouts.factors import UNSET, Difference, Factors

SCHEMA = 1


def recorded_factors(
    inputs: dict,
    traced: dict[str, str | None],
    machine: dict,
    flags: list[str],
    tensor_parallel_size: int,
    launch: dict | None = None,
    hashing: dict | None = None,
) -> dict:
    """The ``factors`` a warm writes for the folder vLLM used, from the child's key inputs and worker reports,
    the launch inputs (:mod:`cachetool.engines.vllm.launch`) of the pull's fast path, and what vLLM hashes of a
    server's command line (:mod:`cachetool.engines.vllm.child.in_vllm.cachetool_vllm_hashing`: the pull's
    verdict without vLLM)."""
    compiler = dict(inputs["compiler"]["values"])
    compiler.update(machine)
    out = {
        "env": inputs["env"],
        "config": inputs["config"],
        "inductor": inputs.get("inductor") or {"hash": None, "values": {}},
        "compiler": {"hash": None, "values": compiler},
        "code": {"hash": None, "values": dict(sorted(traced.items()))},
        "serve": {
            "hash": None,
            "values": {"model": inputs["model"], "flags": list(flags), "tensor_parallel_size": tensor_parallel_size},
        },
    }
    if launch is not None:
        out["launch"] = {"hash": None, "values": launch}
    if hashing is not None:
        out["hashing"] = {"hash": None, "values": hashing}
    return out


def _values(factors: Factors, name: str) -> dict:
    return factors.values(name) or {}


def _dict(value: Any) -> dict:
    """A recorded part that should be an object, as one (a file of another shape compares as empty)."""
    return value if isinstance(value, dict) else {}


def differences(recorded: Factors, local: dict, local_traced: dict[str, str | None] | None = None) -> list[Difference]:
    """Where the key inputs a bundle recorded (``recorded``: its factors) and this server's (``local``: the
    child's key inputs) differ, most telling first: vLLM and torch versions, the model, env factors, config
    fields (only of sub-configs whose hashes differ: vLLM hashes a subset of the fields), traced files."""
    out: list[Difference] = []
    local = _dict(local)
    rc, lc = _values(recorded, "compiler"), _dict(_dict(local.get("compiler")).get("values"))
    for name in ("vllm", "torch", "mega_aot_artifact"):
        if not same_json(rc.get(name, UNSET), lc.get(name, UNSET)):
            out.append(Difference("compiler", name, rc.get(name, UNSET), lc.get(name, UNSET)))
    model = _values(recorded, "serve").get("model", UNSET)
    paths = [model, local.get("model")]
    if not same_json(model, local.get("model")):
        out.append(Difference("config", "model", model, local.get("model")))
    config, env = _dict(local.get("config")), _dict(local.get("env"))
    if recorded.hash_of("config") != config.get("hash"):
        # the model path also fills model_config.model, .tokenizer, .served_model_name: named once above
        out += sorted(
            (
                d
                for d in _config_diffs(_values(recorded, "config"), _dict(config.get("values")))
                if not _only_the_path(d, paths)
            ),
            key=_telling,
        )
    if recorded.hash_of("env") != env.get("hash"):
        out += _field_diffs("env", _values(recorded, "env"), _dict(env.get("values")))
    inductor = _dict(local.get("inductor"))
    if recorded.values("inductor") is not None and recorded.hash_of("inductor") != inductor.get("hash"):
        out += _field_diffs("inductor", _values(recorded, "inductor"), _dict(inductor.get("values"))) or [
            Difference("inductor", "(config)", recorded.hash_of("inductor"), inductor.get("hash"))
        ]
    for fid, digest in sorted(_values(recorded, "code").items()):
        here = (local_traced or {}).get(fid, digest)
        if here != digest:
            out.append(Difference("code", fid, digest, UNSET if here is None else here))
    return out


# The config fields a user changes on purpose, named before what follows from them (another config.json also
# changes the derived sizes; another mode also changes custom_ops).
TELLING = (
    "model_config.hf_config.",
    "compilation_config.mode",
    "compilation_config.",
    "parallel_config.",
    "cache_config.",
    "scheduler_config.",
    "model_config.",
)


def _telling(d: Difference) -> tuple[int, str]:
    return next((i for i, prefix in enumerate(TELLING) if d.name.startswith(prefix)), len(TELLING)), d.name


def _only_the_path(d: Difference, paths: list) -> bool:
    """A config field that differs only because the model path does (``model``, ``tokenizer``,
    ``served_model_name``: one path, or a list of just it). Values of any JSON shape compare by their text."""

    def text(v: Any) -> str:
        return canonical(v[0] if isinstance(v, list) and len(v) == 1 else v)

    a, b = (canonical(p) for p in paths)
    return a != b and sorted((text(d.a), text(d.b))) == sorted((a, b))


def _field_diffs(category: str, a: dict, b: dict, prefix: str = "", nested: bool = False) -> list[Difference]:
    return [Difference(category, f"{prefix}{d.field}", d.a, d.b) for d in field_differences(a, b, nested=nested)]


def _config_diffs(a: dict[str, Any], b: dict[str, Any]) -> list[Difference]:
    out: list[Difference] = []
    for name in sorted(set(a) | set(b), key=str):
        sa, sb = a.get(name, UNSET), b.get(name, UNSET)
        if not (isinstance(sa, dict) and isinstance(sb, dict)):  # a sub-config of another shape: as a whole
            if not same_json(sa, sb):
                out.append(Difference("config", str(name), sa, sb))
            continue
        if same_json(sa.get("hash"), sb.get("hash")):
            continue
        fields = _field_diffs(
            "config",
            {k: v for k, v in sa.items() if k != "hash"},
            {k: v for k, v in sb.items() if k != "hash"},
            prefix=f"{name}.",
            nested=True,
        )
        out += fields or [Difference("config", f"{name} (hash)", sa.get("hash", UNSET), sb.get("hash", UNSET))]
    return out
