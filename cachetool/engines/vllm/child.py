"""The child process that runs real vLLM for ``cachetool warm|check|pull --engine vllm``.

Run as a script by the interpreter that has vLLM (``python child.py REQUEST.json RESULT.json``): it imports only
the standard library, vLLM and torch, so it works from any virtual environment that has vLLM, with or without
cachetool. The request names a mode:

- ``key``: vLLM's own parser (``EngineArgs``) reads the server's flags, ``create_engine_config`` builds the
  config the server will build, and the inputs of vLLM's AOT cache key are reported (:func:`key_inputs`): the
  env factors, each sub-config's hash and fields, the vLLM and torch versions, the model. Nothing starts;
  nothing is written. With ``traced_files`` it also re-hashes those files here.
- ``warm`` / ``check``: the same, then the engine starts on ``VLLM_CACHE_ROOT`` exactly as ``vllm serve`` builds
  it (usage context of the OpenAI server, so its defaults apply), a few prefill and decode requests run, and
  every worker reports what it compiled or loaded (:func:`worker_report`, through ``collective_rpc``).

The result is one JSON object; any failure is ``{"ok": false, "error": "<vLLM's last error line>"}``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import time
import traceback

LONG = 200  # a field value longer than this is recorded by its digest


# ---------------------------------------------------------------------------------------------- key inputs

def _describe(value) -> object:
    """A value as vLLM hashes it (``normalize_value``), short enough for a manifest: long ones by digest."""
    from vllm.config.utils import normalize_value

    try:
        v = normalize_value(value)
        text = json.dumps(v, sort_keys=True, default=str)
    except Exception:
        v = text = repr(value)
    if len(text) > LONG:
        return f"sha256:{hashlib.sha256(text.encode()).hexdigest()[:16]} ({len(text)} chars)"
    return v


def _config_fields(config) -> dict:
    out = {}
    for f in dataclasses.fields(config):
        if f.name.startswith("_"):
            continue
        try:
            out[f.name] = _describe(getattr(config, f.name))
        except Exception as exc:  # a property that cannot be read before the engine starts
            out[f.name] = f"<unreadable: {type(exc).__name__}>"
    return out


def key_inputs(vllm_config) -> dict:
    """What vLLM's AOT key (``aot_compile_hash_factors`` + the forward's identity) is made of, before the engine
    starts, in cachetool's factor shape: ``env``, ``config`` (one entry per sub-config: its hash and fields),
    ``compiler`` (versions). Deterministic for the same flags, environment and installation."""
    import torch
    import vllm
    import vllm.envs as envs
    from vllm.config.utils import hash_factors

    env_values = {k: _describe(v) for k, v in envs.compile_factors().items()}
    configs = {}
    for f in dataclasses.fields(vllm_config):
        sub = getattr(vllm_config, f.name, None)
        if sub is not None and dataclasses.is_dataclass(sub) and hasattr(sub, "compute_hash"):
            try:
                configs[f.name] = {"hash": sub.compute_hash(), **_config_fields(sub)}
            except Exception as exc:
                configs[f.name] = {"hash": f"<unhashable: {type(exc).__name__}>"}
    return {
        "env": {"hash": hash_factors(envs.compile_factors()), "values": env_values},
        "config": {"hash": vllm_config.compute_hash(), "values": configs},
        "compiler": {"hash": None, "values": {"vllm": vllm.__version__, "torch": torch.__version__,
                                              "mega_aot_artifact": bool(getattr(envs, "VLLM_USE_MEGA_AOT_ARTIFACT",
                                                                                False))}},
        "model": vllm_config.model_config.model,
    }


def file_id(path: str) -> str:
    """A traced file's path-independent id: relative to the ``sys.path`` entry that holds it (the same file of
    the same install at another prefix gets the same id), else its absolute path."""
    real = os.path.realpath(path)
    best = None
    for entry in sys.path:
        base = os.path.realpath(entry or ".")
        if real.startswith(base + os.sep) and (best is None or len(base) > len(best)):
            best = base
    return os.path.relpath(real, best) if best else real


def file_digest(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def rehash(ids: list[str]) -> dict[str, str | None]:
    """sha256 of each traced file id as this installation has it (None: not here)."""
    out = {}
    for i in ids:
        if os.path.isabs(i):
            out[i] = file_digest(i)
            continue
        found = next((os.path.join(e, i) for e in sys.path if os.path.isfile(os.path.join(e or ".", i))), None)
        out[i] = file_digest(found) if found else None
    return out


# ---------------------------------------------------------------------------------------------- the engine

def worker_report(worker) -> dict:
    """Run inside each worker (``collective_rpc``): what this rank compiled and loaded, and where."""
    import torch._dynamo.utils as dynamo_utils
    from vllm.compilation.counter import compilation_counter

    inductor = dict(dynamo_utils.counters.get("inductor", {}))
    stats = dict(dynamo_utils.counters.get("stats", {}))
    aot = []
    model = getattr(getattr(worker, "model_runner", None), "model", None)
    if model is not None:
        for m in model.modules():
            path = getattr(m, "_aot_compilation_path", None)
            if path:
                aot.append(str(path))
    mapped = set()
    try:
        with open("/proc/self/maps") as f:  # the kernel libraries this process loaded (Inductor's CPU kernels)
            for line in f:
                path = line.split(None, 5)[-1].strip()
                if "/inductor_cache/" in path and path.endswith(".so"):
                    mapped.add(path)
    except OSError:
        pass
    config = getattr(worker, "vllm_config", None)
    traced = sorted(config.compilation_config.traced_files) if config is not None else []
    return {
        "rank": getattr(worker, "rank", 0),
        "aot_paths": sorted(set(aot)),
        "mapped_kernels": sorted(mapped),
        "inductor": {k: int(v) for k, v in inductor.items()},
        "dynamo_unique_graphs": int(stats.get("unique_graphs", 0)),
        "vllm_counters": dataclasses.asdict(compilation_counter),
        "traced_files": {file_id(p): file_digest(p) for p in traced},
    }


def drive(engine, prompts: list[list[int]], max_tokens: int) -> int:
    """Prefill every prompt and decode ``max_tokens`` tokens each, as a server's first requests would."""
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, detokenize=False, ignore_eos=True)
    for i, ids in enumerate(prompts):
        engine.add_request(f"cachetool-{i}", {"prompt_token_ids": ids}, params)
    done = 0
    while engine.has_unfinished_requests():
        done += sum(1 for o in engine.step() if o.finished)
    return done


def inspect_models_in_process() -> None:
    """vLLM inspects a model class in a fresh interpreter (``registry._run_in_subprocess``: another ``import
    vllm``, 10-20 s here) unless ``$VLLM_CACHE_ROOT/modelinfos`` has it; a key question starts no engine, so the
    same inspection runs in this process instead (the same ``ModelInfo``, seconds sooner)."""
    from vllm.model_executor.models import registry

    if callable(getattr(registry, "_run_in_subprocess", None)):
        registry._run_in_subprocess = lambda fn: fn()


class FlagError(ValueError):
    """vLLM's parser refused a flag."""


def run(request: dict) -> dict:
    t0 = time.perf_counter()
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    class Parser(FlexibleArgumentParser):
        def error(self, message):  # one line for the user, not argparse's usage screen and exit
            raise FlagError(f"vLLM refused the flags: {message}")

    if request["mode"] == "key":
        inspect_models_in_process()
    parser = EngineArgs.add_cli_args(Parser(prog="vllm serve"))
    args = parser.parse_args(["--model", request["model"], *request["argv"]])
    engine_args = EngineArgs.from_cli_args(args)
    usage = UsageContext.OPENAI_API_SERVER  # what `vllm serve` builds its config with
    imported = time.perf_counter() - t0
    inputs = key_inputs(engine_args.create_engine_config(usage))
    result = {"ok": True, "key_inputs": inputs, "seconds": {"import": round(imported, 3)}}
    if request.get("traced_files"):
        result["traced_files"] = rehash(request["traced_files"])
    result["seconds"]["key"] = round(time.perf_counter() - t0 - imported, 3)
    if request["mode"] == "key":
        return result

    from vllm.v1.engine.llm_engine import LLMEngine

    t1 = time.perf_counter()
    engine = LLMEngine.from_engine_args(engine_args, usage_context=usage)
    t2 = time.perf_counter()
    finished = drive(engine, request["prompts"], request["max_tokens"])
    t3 = time.perf_counter()
    result["workers"] = engine.collective_rpc(worker_report)
    result["requests_finished"] = finished
    try:
        engine.engine_core.shutdown()  # worker processes end with the engine, not after the child
    except Exception as exc:  # noqa: BLE001 - the result is complete; a failed shutdown is only logged
        print(f"cachetool: engine shutdown: {exc}", file=sys.stderr)
    result["seconds"].update(engine_init=round(t2 - t1, 3), workload=round(t3 - t2, 3))
    return result


def last_error(exc: BaseException) -> str:
    """The innermost exception as one line (vLLM wraps its refusals in several layers)."""
    while exc.__cause__ is not None or (exc.__context__ is not None and not exc.__suppress_context__):
        exc = exc.__cause__ or exc.__context__
    text = " ".join(str(exc).split()) or type(exc).__name__
    line = f"{type(exc).__name__}: {text}"
    return line if len(line) <= 500 else line[:497].rsplit(" ", 1)[0] + " …"  # a cut is marked


def main(argv: list[str]) -> int:
    request_path, result_path = argv
    with open(request_path) as f:
        request = json.load(f)
    try:
        result = run(request)
        code = 0
    except FlagError as exc:
        result = {"ok": False, "error": str(exc), "usage": True}
        code = 2
    except BaseException as exc:  # noqa: BLE001 - every failure becomes the one-line result
        traceback.print_exc()
        result = {"ok": False, "error": last_error(exc)}
        code = 1
    with open(result_path + ".tmp", "w") as f:
        json.dump(result, f, sort_keys=True, default=str)
    os.replace(result_path + ".tmp", result_path)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # vLLM's engine threads and worker processes must not hold the exit


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
