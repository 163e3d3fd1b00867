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
import tempfile
import time
from pathlib import Path
from typing import Any, BinaryIO, Callable

from cachetool.engines.vllm import facts, key, launch, releases, server_command, unfinished, worker_facts
from cachetool.errors import (EngineFailedError, EngineFlagsError, EngineLayoutError, EngineMissError,
                              EngineUnavailableError, UsageError, WaitTimeoutError)
from cachetool.cache_root import AOT, TCC, TRITON_CACHE
from cachetool import envs, process_tree
from cachetool.engines import machine  # the torch-free machine facts, every engine's
from cachetool.engines.native.machine import model_presets  # a name --model must not be

CHILD = Path(__file__).with_name("child.py")
AOT_DIR = (TCC, AOT)
KERNEL_SUFFIXES = (".so", ".cubin", ".hsaco")
# What a headless start needs and a server's key does not hash (vLLM's compute_hash leaves load_config and the
# tokenizer out): given before the user's flags, so that a flag after `--` still wins.
HEADLESS_FLAGS = ("--skip-tokenizer-init",)
DUMMY_WEIGHTS = ("--load-format", "dummy")
# The first requests of a server: a short and a longer prompt, and a one-token one (decode-sized batches follow).
PROMPTS = ([1, 5, 7, 11], list(range(1, 48)), [3])
MAX_TOKENS = 4


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
    aot_artifacts_loaded: int        # vLLM's counter num_aot_artifacts_loaded, summed over the workers
    compiled_artifacts_loaded: int   # vLLM's counter num_compiled_artifacts_loaded (GPU: loaded graphs)
    piecewise_loaded: int            # graphs vLLM's piecewise backend took from its cache (its counters)
    piecewise_compiled: int          # graphs it handed to Inductor (its counter num_inductor_compiles)
    startup_seconds: float           # engine init, as vLLM's `LLMEngine` takes it
    seconds: float                   # the whole child process, exec to exit
    phases: dict[str, float]         # import, key, engine_init, workload
    tensor_parallel_size: int
    ranks: list[dict[str, Any]]
    log: str                         # vLLM's log of this start
    aot_paths: list[str] = dataclasses.field(default_factory=list)  # the AOT files loaded or saved
    environment_notes: list[str] = dataclasses.field(default_factory=list)  # what a server started here would miss
    engine: str = "vllm"

    @property
    def hit(self) -> bool:  # the server's folder was there and nothing compiled: no kernel, no piecewise graph
        return self.inductor_compiled == 0 and self.piecewise_compiled == 0 and self.key_existed

    @property
    def graphs_compiled(self) -> int:  # the name the native engine's results use (warm summaries, CI scripts)
        return self.inductor_compiled

    @property
    def graphs_loaded(self) -> int:  # CPU: kernel libraries mapped; GPU (cubins are not mapped): vLLM's counter
        return self.inductor_loaded or self.compiled_artifacts_loaded

    @property
    def cache_dir(self) -> str | None:
        return str(Path(self.cache_root, *AOT_DIR, self.cache_key)) if self.cache_key else None

    def miss_reason(self) -> str | None:
        if self.hit:
            return None
        if not self.key_existed:
            return (f"vLLM used key folder {short_key(self.cache_key)}, which {self.cache_root} did not hold "
                    "(another model path, flag, environment or install than the cache was warmed with)")
        aot = "" if self.aot_loaded else (f"; vLLM did not load its AOT artifact ({self.aot_note()}): "
                                          f"{self.aot_error or 'none saved'}")
        graphs = f", vLLM compiled {self.piecewise_compiled} piecewise graph(s)" if self.piecewise_compiled else ""
        return (f"Inductor compiled {self.inductor_compiled} kernel(s){graphs} in key folder "
                f"{short_key(self.cache_key)}{aot}")

    def aot_note(self) -> str:
        return releases.aot_note(self.vllm_version, releases.device_here())

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(hit=self.hit, miss_reason=self.miss_reason(), graphs_compiled=self.graphs_compiled,
                 aot_expected=releases.aot_loads(self.vllm_version, releases.device_here()),
                 graphs_loaded=self.graphs_loaded, cache_dir=self.cache_dir)
        return d

    def pack_folder(self) -> Path:
        """What a warm's push packs: the whole cache root, which holds everything the server reads on a hit (the
        AOT key folder, the piecewise folder(s) its backend loads, ``modelinfos/``, ``triton_cache/``)."""
        return Path(self.cache_root)

    def lines(self) -> list[str]:
        """The start as a few lines for a terminal (the JSON object is :meth:`to_json`'s)."""
        aot = "loaded" if self.aot_loaded else f"not loaded ({self.aot_error or 'none saved yet'}; {self.aot_note()})"
        if self.command == "warm":
            verdict = (f"warmed: Inductor compiled {self.inductor_compiled} kernel(s)" if self.inductor_compiled
                       else "already warm: Inductor compiled nothing")
        else:
            verdict = "HIT: Inductor compiled nothing" if self.hit else f"MISS: {self.miss_reason()}"
        return [f"{self.command}: model {self.model} with vLLM {self.vllm_version} "
                f"(tensor parallel {self.tensor_parallel_size})",
                f"  cache root     {self.cache_root}",
                f"  cache key      {self.cache_key or '-'}" + ("" if self.key_existed else " (new)"),
                f"  inductor       compiled {self.inductor_compiled} kernel(s), loaded {self.inductor_loaded}; "
                f"Dynamo traces {self.dynamo_traces}",
                f"  AOT artifact   {aot}",
                f"  start-up       {self.startup_seconds:.2f} s engine init (process {self.seconds:.2f} s); "
                + ", ".join(f"{k} {v:.2f} s" for k, v in self.phases.items()),
                f"  vLLM log       {self.log}",
                *(f"  server env     {note}" for note in self.environment_notes),
                f"  result         {verdict}"]


def short_key(h: str | None) -> str:
    return (h[:16] + "...") if h else "(none)"


# ---------------------------------------------------------------------------------------------- preflight

def python() -> str:
    """The interpreter that runs vLLM: ``CACHETOOL_VLLM_PYTHON``, else this one."""
    return facts.vllm_python()


def require_vllm() -> str:
    """vLLM's version (of the interpreter that runs it), or :class:`EngineUnavailableError` naming how to install
    it."""
    version = facts.vllm_version()
    if version is None:
        raise EngineUnavailableError(f"--engine vllm: vLLM is not installed for {python()}; install it with "
                                     "scripts/install.sh --vllm (or set CACHETOOL_VLLM_PYTHON)")
    return version


def check_model(model: str) -> None:
    """A model folder must hold ``config.json`` (dummy weights are built from it); a name that is no path is a
    hub id, served offline from the local Hugging Face cache, unless it is one of the native engine's presets."""
    p = Path(model).expanduser()
    looks_like_path = model.startswith((".", "/", "~")) or p.exists()
    if not looks_like_path:
        if model in model_presets():
            raise UsageError(f"--model {model}: a preset of the native engine; --engine vllm --model takes a model "
                             "folder with config.json (or a hub id in the local Hugging Face cache)")
        return
    if not p.is_dir():
        raise UsageError(f"--model {model}: not a model folder (vLLM needs a folder with config.json, or a hub id)")
    if not (p / "config.json").is_file():
        raise UsageError(f"--model {model}: the folder has no config.json")


def server_model(model: str | None, flags: list[str]) -> tuple[str, list[str]]:
    """The model a server command line serves and its flags without it: ``vllm serve M`` (a positional tag),
    ``--model M`` after ``--``, or cachetool's ``--model``; two that disagree are a usage error."""
    named, rest = server_command.split_model(flags, None)
    if named and model and named != model:
        raise EngineFlagsError(f"the model after -- ({named}) and --model ({model}) differ: name it once")
    chosen = named or model
    if not chosen:
        raise UsageError("--engine vllm needs the server's model: --model M, or M after -- as in `vllm serve M`")
    return chosen, rest


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


def child_env(cache_root: Path | None, tp: int) -> dict[str, str]:
    """The child's environment, as the server's: this process's, offline, the cache root (``None``: the child
    makes a scratch root of its own), and, for tensor parallel on the CPU, one core group per rank (vLLM's CPU
    workers need ``VLLM_CPU_OMP_THREADS_BIND``; it is one of vLLM's hashed env factors, so a server must set the
    same value: ``docs/vllm.md``). The engine core runs in its own process, as under ``vllm serve``."""
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", VLLM_DO_NOT_TRACK="1")
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # vLLM's default (on): the server's process structure
    if cache_root is not None:
        env["VLLM_CACHE_ROOT"] = str(cache_root)
        # vLLM's own Triton kernels (JIT-compiled at start, outside torch.compile's cache) land in the root and
        # ship with it; a server reads them with the same variable (docs/vllm.md). Not in vLLM's key.
        env.setdefault("TRITON_CACHE_DIR", str(Path(cache_root) / TRITON_CACHE))
    else:
        env.pop("VLLM_CACHE_ROOT", None)
    # vLLM's workers import cachetool_vllm_probe by name (spawned workers too): its folder goes on their path
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CHILD.parent), env.get("PYTHONPATH")) if p)
    # only where vLLM runs on the CPU: on a GPU the variable means nothing, but vLLM would still hash it
    if tp > 1 and not env.get("VLLM_CPU_OMP_THREADS_BIND") and machine.cuda_device(0) is None:
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

def run_child(request: dict, cache_root: Path | None, log: BinaryIO, *, timeout: float | None = None) -> dict:
    """Run the child with ``request`` (on its stdin) and vLLM's output into ``log``; its result (read from an
    unlinked file, so that nothing is left behind whatever happens), or the one-line error (vLLM's last) as an
    exception. ``cache_root`` None: the child uses a scratch root of its own and removes it. However the run ends
    (done, ``timeout``, a stop signal), the child's process group goes with it (:func:`process_tree.end_group`)."""
    tp = tensor_parallel_size(request["argv"])
    with tempfile.TemporaryFile() as result_file:
        fd = result_file.fileno()
        body = json.dumps({**request, "result_fd": fd, "scratch_root": cache_root is None}).encode()
        # its own process group: vLLM's EngineCore, workers and compile jobs inherit it, so they end with it
        proc = subprocess.Popen([python(), str(CHILD)], stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                env=child_env(cache_root, tp), pass_fds=(fd,), start_new_session=True,
                                preexec_fn=process_tree.die_with_parent)
        try:
            proc.communicate(body, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise WaitTimeoutError(f"vLLM did not finish within {timeout:g} s{log_note(log)}") from None
        finally:  # done, timed out or interrupted (a stop signal): nothing of the child's outlives it
            process_tree.end_group(proc.pid)
            proc.wait()
        result_file.seek(0)
        text = result_file.read()
    if not text:
        raise EngineFailedError(f"vLLM exited with code {proc.returncode} before reporting: "
                                f"{last_log_error(log)}{log_note(log)}")
    result = json.loads(text)
    if not result.get("ok"):
        if result.get("layout"):
            raise EngineLayoutError(f"vLLM {facts.vllm_version()}: {result.get('error')} (cachetool is tested with "
                                    f"vLLM {releases.described_range('cpu')} on the CPU, "
                                    f"{releases.described_range('cuda')} on CUDA)")
        cls = EngineFlagsError if result.get("usage") else EngineFailedError
        raise cls(f"{result.get('error')}{log_note(log)}")
    return result


def log_note(log: BinaryIO) -> str:
    """`` (log: PATH)`` for a named log file; nothing for an unlinked one."""
    name = getattr(log, "name", None)
    return f" (log: {name})" if isinstance(name, str) and os.path.exists(name) else ""


def log_lines(log: BinaryIO | Path) -> list[str]:
    try:
        if isinstance(log, Path):
            return log.read_text(errors="replace").splitlines()
        log.flush()
        log.seek(0)
        return log.read().decode(errors="replace").splitlines()
    except OSError:
        return []


def last_log_error(log: BinaryIO | Path) -> str:
    """The last line of vLLM's log that names an error, else its last line."""
    lines = [ln.strip() for ln in log_lines(log) if ln.strip()]
    for ln in reversed(lines):
        if re.search(r"(Error|Exception|error:)", ln):
            return ln[-300:]
    return lines[-1][-300:] if lines else "(empty log)"


def kernel_files(cache_root: Path) -> set[str]:
    """Kernel binaries under the root's compile cache and Triton cache (a new one is a kernel compiled)."""
    out: set[str] = set()
    for top in (cache_root.joinpath(*AOT_DIR[:1]), cache_root / TRITON_CACHE):
        if top.is_dir():
            out.update(str(p) for p in top.rglob("*") if p.suffix in KERNEL_SUFFIXES and p.is_file())
    return out


def key_folders(cache_root: Path) -> set[str]:
    top = cache_root.joinpath(*AOT_DIR)
    return {p.name for p in top.iterdir() if p.is_dir()} if top.is_dir() else set()


# ---------------------------------------------------------------------------------------------- one start

def start(command: str, model: str | None, *, cache_root: str | Path, flags: list[str] | tuple[str, ...] = (),
          load_weights: bool = False, progress: Callable[[str], None] | None = None) -> VllmStartResult:
    """Start real vLLM headless on ``cache_root`` as ``vllm serve MODEL FLAGS`` would configure and run it; see
    the module docstring for the phases. ``command``: ``warm`` (records the key inputs) or ``check``. ``model``
    may instead be named in ``flags`` as the server names it (a positional tag, ``--model``)."""
    say = progress or (lambda _m: None)
    version = require_vllm()
    model, rest = server_model(model, list(flags))
    check_model(model)
    root = Path(cache_root).expanduser().resolve()
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    before, keys_before = kernel_files(root), key_folders(root)
    argv = server_argv(rest, load_weights)
    log_path = Path(tempfile.mkstemp(prefix=f"cachetool-vllm-{command}-", suffix=".log")[1])
    say(f"{command}: starting vLLM {version} on {root} (vLLM's log: {log_path})")
    with unfinished.marked(root, command):  # pack refuses the root until this start completes
        t0 = time.perf_counter()
        try:
            with open(log_path, "w+b") as log:
                result = run_child({"mode": command, "model": model, "argv": argv, "prompts": list(PROMPTS),
                                    "max_tokens": MAX_TOKENS}, root, log)
        except BaseException:
            if created:  # a root this failed start made holds only what the failed start wrote
                shutil.rmtree(root, ignore_errors=True)
            raise
        wall = time.perf_counter() - t0
        say(f"{command}: engine ready in {result['seconds'].get('engine_init', 0):.1f} s")
        if result.get("hashing_error"):
            say(f"{command}: what vLLM hashes could not be recorded ({result['hashing_error']}): a pull for "
                "another server command will ask vLLM itself")
        out = _report(command, model, root, rest, version, result, before, keys_before, log_path, wall)
        if command == "warm":
            _record(out, result, model, rest)
    return out


def _report(command, model, root, flags, version, result, before, keys_before, log_path, wall) -> VllmStartResult:
    workers = sorted(result["workers"], key=lambda w: w["rank"])
    done = worker_facts.from_workers(workers)
    after = kernel_files(root)
    ranks = [{"rank": w["rank"], "aot": w.get("aot", []), "dynamo_traces": w["dynamo_unique_graphs"],
              "mapped_kernels": len(w.get("mapped_kernels", [])), "vllm_counters": w["vllm_counters"]}
             for w in workers]
    return VllmStartResult(
        command=command, model=model, cache_root=str(root), flags=list(flags), vllm_version=version,
        cache_key=done.cache_key, cache_keys=done.cache_keys,
        key_existed=bool(done.cache_keys) and set(done.cache_keys) <= keys_before,
        inductor_compiled=len(after - before), inductor_loaded=len(done.mapped_kernels & before),
        dynamo_traces=done.dynamo_traces, aot_loaded=done.aot_loaded, aot_saved=done.aot_saved,
        aot_error=None if done.aot_loaded else worker_facts.aot_failure(log_path),
        aot_artifacts_loaded=done.aot_artifacts_loaded, compiled_artifacts_loaded=done.compiled_artifacts_loaded,
        piecewise_loaded=done.piecewise_loaded, piecewise_compiled=done.piecewise_compiled,
        startup_seconds=result["seconds"].get("engine_init", 0.0), seconds=round(wall, 3),
        phases=result["seconds"], tensor_parallel_size=max(1, len(workers)), ranks=ranks, log=str(log_path),
        aot_paths=done.aot_paths)


def _record(out: VllmStartResult, result: dict, model: str, flags: list[str]) -> None:
    """Write the key inputs beside every rank folder vLLM used (what a pull compares before downloading)."""
    traced: dict[str, str | None] = {}
    for w in result["workers"]:
        traced.update(w["traced_files"])
    gpu = machine.cuda_device(0)
    here = {"device": "cuda" if gpu else "cpu", **facts.machine_facts("cuda" if gpu else "cpu"),
            "gpu": gpu["device"] if gpu else None,
            "capability": gpu["capability"] if gpu else None}
    here.pop("engine", None)
    server_only = result.get("server_only_options") or {}
    inputs = launch.LaunchInputs.of(model, flags, child_env(None, out.tensor_parallel_size), server_only,
                                    hashed=result["key_inputs"]["env"]["values"])
    factors = key.recorded_factors(result["key_inputs"], traced, here, flags, out.tensor_parallel_size,
                                   launch=inputs.to_values(server_only), hashing=result.get("hashing"))
    for p in out.aot_paths:
        rank_dir = Path(p).parent
        doc = {"schema": key.SCHEMA, "engine": "vllm", "hash": rank_dir.parent.name, "factors": factors}
        (rank_dir / key.FACTORS_FILE).write_text(json.dumps(doc, indent=1, sort_keys=True, default=str))


def environment_notes(root: Path, wanted: dict[str, str]) -> list[str]:
    """What a server started with this process's environment would miss of the cache at ``root`` (``wanted``:
    the engine's server environment for it): a cache root it would not read, a Triton cache it would not read."""
    notes = []
    have = envs.get("VLLM_CACHE_ROOT")
    if Path(have or "~/.cache/vllm").expanduser().resolve() != root:
        notes.append(f"VLLM_CACHE_ROOT is {have or 'unset (~/.cache/vllm)'}: a server started so reads another "
                     f"cache root and compiles; start it with VLLM_CACHE_ROOT={wanted['VLLM_CACHE_ROOT']}")
    triton = Path(wanted["TRITON_CACHE_DIR"])
    kernels = sum(1 for p in triton.iterdir() if p.is_dir()) if triton.is_dir() else 0
    have = envs.get("TRITON_CACHE_DIR")
    if kernels and (have is None or Path(have).expanduser().resolve() != triton):
        notes.append(f"TRITON_CACHE_DIR is {have or 'unset (~/.triton/cache)'}: a server started so JIT-compiles "
                     f"vLLM's {kernels} Triton kernel(s) of {triton} again (12-17 s for 26 on the H200); start it "
                     f"with TRITON_CACHE_DIR={triton}")
    return notes


def require_hit(out: VllmStartResult) -> None:
    if not out.hit:
        raise EngineMissError(f"check: not a hit: {out.miss_reason()}", start=out)
