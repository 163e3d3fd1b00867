"""The GPU acceptance command: every GPU path, run as a user runs it, judged by what the real server or program did.

    python3 benchmarks/gpu_acceptance.py vllm --out OUT          # Llama-3.2-1B's config: the verdict rows
    python3 benchmarks/gpu_acceptance.py moe --out OUT           # FP8 MoE: cold, kept, pulled and check, one call
    python3 benchmarks/gpu_acceptance.py dense --out OUT         # the same rows for an FP8 dense model
    python3 benchmarks/gpu_acceptance.py moe-cold --out OUT      # FP8 MoE: stock cold (a call of its own)
    python3 benchmarks/gpu_acceptance.py moe-pulled --out OUT    # FP8 MoE: kept, warm, push, pull, vllm serve, check
    python3 benchmarks/gpu_acceptance.py dense-cold --out OUT    # FP8 dense: the same two calls (dense-pulled)
    python3 benchmarks/gpu_acceptance.py native --out OUT        # the AOT hot start vs stock warm (no vLLM)
    python3 benchmarks/gpu_acceptance.py torch --out OUT         # the torch engine: default and max-autotune (--modes)
    python3 benchmarks/gpu_acceptance.py table --out OUT         # the one table of every row recorded in OUT

benchmarks/gpu_acceptance.sh runs the parts through the device tool's calls (each part fits one call of under ten
minutes; the machine stays warm between them). Every part appends its rows to ``OUT/rows.jsonl`` and its progress to
``OUT/progress.log`` as it goes (a call that times out still returns them); ``table`` prints them. Each row has a
figure and, where cachetool gives a verdict, whether it equals what the server did: ``check = server``.

vLLM rows (a fresh pod before each start: ``~/.triton``, ``~/.cache/flashinfer``, ``/tmp/torchinductor_$USER``
cleared; each server is the real ``vllm serve``, its own processes, with the environment ``pull`` printed):
warm (cold, its engine init) → push → pull with the server's argv → ``vllm serve`` on the pulled root → ``check
--require-hit`` on a root pulled again → the same root with vLLM's piecewise folder removed (a perturbed start:
check and server) → a changed hashed flag (pull refuses before download; the server compiles) → an eager server
(``-O0``) → the pulled root read-only (check refuses in one line; the server fails) → a pull to another path.
Every root but the last is pulled at the warm's path after the warm's root is removed (a fresh pod, the documented
flow): vLLM 0.26 loads compiled pieces from the path the warm saved them at.

FP8 rows: a small FP8 block-quantized Qwen3-MoE-shaped config (dummy weights, 4 layers), and its dense twin (the
same shapes, no experts: ``dense``). ``moe`` and ``dense`` run a model's rows in one call. ``moe-cold``: ``vllm
serve`` on an empty root of a fresh pod, with every JIT cache sent into the root (stock vLLM: the variables only
choose folders). ``moe-pulled``: the same again on that root (kept: a node that keeps every cache), ``cachetool
warm`` on that root (a hot start that records the facts) with ``--push``, the root removed and the pod cleared (a
fresh pod at the same path), ``pull`` with the server's argv, ``vllm serve`` with the printed environment, and
``check --require-hit`` on the pulled root. ``dense-cold`` and ``dense-pulled``: the same two calls for the dense
model. JIT files are counted in the root and outside it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import getpass
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

HEADLESS = ["--load-format", "dummy", "--skip-tokenizer-init"]
POD = (
    "~/.triton",
    "~/.cache/flashinfer",
    "~/.cache/vllm",
    f"/tmp/torchinductor_{getpass.getuser()}",
    "~/.nv/ComputeCache",
)
# A Qwen3-MoE-shaped FP8 model, block-quantized as DeepSeek's and Qwen's FP8 checkpoints are (128x128 blocks)
FP8_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_experts": 32,
    "num_experts_per_tok": 8,
    "norm_topk_prob": True,
    "num_hidden_layers": 4,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "quantization_config": {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": [128, 128],
    },
}
# A Qwen3-shaped dense FP8 model, block-quantized the same way: FP8 linear layers without experts
FP8_DENSE = {
    **{
        k: v
        for k, v in FP8_MOE.items()
        if k
        not in (
            "moe_intermediate_size",
            "num_experts",
            "num_experts_per_tok",
            "norm_topk_prob",
            "decoder_sparse_step",
            "mlp_only_layers",
        )
    },
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "num_hidden_layers": 4,
}
FP8_MODELS = {"moe": FP8_MOE, "dense": FP8_DENSE}
MOE_FLAGS = [
    "--max-model-len",
    "2048",
    "--max-num-seqs",
    "16",
    "--max-num-batched-tokens",
    "2048",
    "--gpu-memory-utilization",
    "0.5",
]


@dataclasses.dataclass
class Run:
    out: Path

    def say(self, msg: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {msg}"
        print(line, flush=True)
        with open(self.out / "progress.log", "a") as f:
            f.write(line + "\n")

    def row(
        self, part: str, name: str, figure: str, verdict: str | None = None, server: str | None = None, **extra
    ) -> None:
        equal = None if verdict is None or server is None else verdict == server
        doc = {
            "part": part,
            "row": name,
            "figure": figure,
            "cachetool": verdict,
            "server": server,
            "equal": equal,
            **extra,
        }
        with open(self.out / "rows.jsonl", "a") as f:
            f.write(json.dumps(doc, default=str) + "\n")
        self.say(f"ROW {part} | {name} | {figure} | cachetool {verdict} | server {server} | equal {equal}")


def cli(*args, env: dict | None = None, timeout: float = 900) -> tuple[subprocess.CompletedProcess, float, dict]:
    """One ``cachetool`` process: the process, its wall time, its JSON object ({} when none)."""
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "cachetool", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )
    doc = {}
    if "{" in p.stdout:
        try:
            doc = json.loads(p.stdout[p.stdout.index("{") :])
        except ValueError:
            doc = {}
    return p, time.perf_counter() - t0, doc


def warm_push(
    work: Path, root: Path, store: str, model: Path, flags: list[str]
) -> tuple[subprocess.CompletedProcess, float, dict]:
    """``cachetool warm --engine vllm`` on ``root`` with ``--push`` to ``store``, signed with a key made for it."""
    cli("keygen", "-o", work / "k")
    return cli(
        "warm",
        "--engine",
        "vllm",
        "--cache-root",
        root,
        "--push",
        store,
        "--sign-key",
        work / "k",
        "--json",
        "--",
        model,
        *flags,
    )


def error_line(p: subprocess.CompletedProcess) -> str:
    return next((ln for ln in p.stderr.splitlines() if ln.startswith("error: ")), p.stderr.strip()[-300:])


def clear_pod() -> None:
    for top in POD:
        shutil.rmtree(os.path.expanduser(top), ignore_errors=True)


def file_total(root: Path) -> int:
    return len(file_set(root))


def file_set(root: Path) -> set[str]:
    """The files under ``root``, relative to it (what a start added is named in its row)."""
    if not root.is_dir():
        return set()
    return {os.path.relpath(os.path.join(d, f), root) for d, _s, files in os.walk(root) for f in files}


def server_word(run) -> str:
    """What the real server did: compiled, compiled nothing, or did not start (the column ``check`` is held to)."""
    if run.ready_seconds < 0 and not run.compiled:
        return "failed to start"
    return "compiled" if run.compiled else "compiled nothing"


def check_word(p: subprocess.CompletedProcess, doc: dict) -> str:
    """What ``check`` said the server would do, in the server column's words."""
    if p.returncode == 2:
        return "failed to start"
    if doc.get("compiles_nothing") or "compiles nothing" in (p.stdout + p.stderr):
        return "compiled nothing"
    c = doc.get("compile", doc)
    return "compiled nothing" if p.returncode == 0 and c.get("hit", True) else "compiled"


def record_start(
    run: Run, name: str, vllm: str, workers: list, new_kernels: int, key_existed: bool, verdict: str
) -> None:
    """A start's worker reports, as tests/engines/vllm/recorded_starts.json keeps them."""
    doc = {
        "name": name,
        "vllm": vllm,
        "device": "cuda",
        "key_existed": key_existed,
        "new_kernels": new_kernels,
        "verdict": verdict,
        "workers": workers,
        "recorded": f"{time.strftime('%Y-%m-%d')} by benchmarks/gpu_acceptance.py on the device machine",
    }
    with open(run.out / "recorded_starts.jsonl", "a") as f:
        f.write(json.dumps(doc) + "\n")


# ------------------------------------------------------------------------------------------------ vLLM rows
def part_vllm(run: Run, work: Path, cpu: bool = False, skip: tuple[str, ...] = (), only: tuple[str, ...] = ()) -> None:
    from cachetool.engines.vllm.install_facts import vllm_version
    from tests.vllm_oracle.server import serve_once
    from tests.vllm_oracle.tiny import CPU_FLAGS, GPU_FLAGS, write_llama_1b, write_model

    vllm = vllm_version()
    if cpu:  # a dry run of the rows on the CPU box (the tiny model), to try this script before a device call
        model, flags = write_model(work / "models" / "tiny"), list(CPU_FLAGS)
    else:
        model, flags = write_llama_1b(work / "models" / "llama-3.2-1b"), list(GPU_FLAGS)
    store = f"file://{work}/store/llama:gpu"
    if only:  # rows again from the store and key an earlier run of this part left in ``work``
        return vllm_rows(run, work, store, model, flags, vllm, skip=skip, only=only)
    clear_pod()
    run.say("vllm: warm (cold) with --push")
    p, wall, doc = warm_push(work, work / "ci", store, model, flags)
    c = doc.get("compile", doc)
    cold = c.get("startup_seconds", -1)
    run.row(
        "vllm",
        "warm (cold start, pushed)",
        f"engine init {cold:.2f} s, wall {wall:.1f} s, exit {p.returncode}",
        extra_error=None if p.returncode == 0 else error_line(p),
    )
    if c.get("ranks"):
        record_start(
            run,
            "vLLM 0.26 CUDA, Llama-3.2-1B config, cold warm on an empty root",
            vllm,
            c["ranks"],
            c.get("inductor_compiled", 0),
            False,
            "compiled",
        )
    p, wall, doc = pull_at_warm_path(work, store, model, flags)  # the warm's root gone: a fresh pod
    run.row(
        "vllm",
        "pull with the server's argv",
        f"{wall:.2f} s wall, exit {p.returncode}",
        server_env=doc.get("server_env"),
    )
    clear_pod()
    run.say("vllm: vllm serve on the pulled root")
    pulled = file_set(work / "ci")
    srv = serve_once(str(model), work / "ci", [*flags, *HEADLESS])
    added = sorted(file_set(work / "ci") - pulled)
    # the AOTAutograd entries the pull installed: a start of vLLM 0.26 reads one per compiled piece, and one it
    # lacks it writes (the pack's rule: cachetool/engines/vllm/layout.py, stale_aotautograd)
    aot_pulled = len({path.split("/aotautograd/")[1].split("/")[0] for path in pulled if "/aotautograd/" in path})
    run.row(
        "vllm",
        "vllm serve on the pulled root",
        f"engine init {srv.engine_init_seconds} s, /health "
        f"{srv.ready_seconds:.1f} s ({(srv.engine_init_seconds or 0) / cold:.2f}x cold), written outside "
        f"{srv.written_outside or 0}, files in root +{len(added)} (AOTAutograd entries pulled: {aot_pulled})",
        None,
        server_word(srv),
        evidence=srv.evidence,
        log=srv.log,
        counters=srv.vllm_counters,
        added_in_root=added[:40],
    )
    record_start(
        run,
        "vLLM 0.26 CUDA, Llama-3.2-1B config, vllm serve on a pulled root",
        vllm,
        srv.reports,
        srv.new_kernels,
        not srv.new_key_folders,
        server_word(srv),
    )
    run.say("vllm: check --require-hit on a root pulled again (a fresh pod)")
    pull_at_warm_path(work, store, model, flags)
    p, wall, doc = cli(
        "check", "--engine", "vllm", "--cache-root", work / "ci", "--require-hit", "--json", "--", model, *flags
    )
    run.row(
        "vllm",
        "check --require-hit on a pulled root",
        f"{wall:.1f} s wall, exit {p.returncode}: {doc.get('miss_reason') or 'hit'}",
        check_word(p, doc),
        server_word(srv),
    )
    vllm_rows(run, work, store, model, flags, vllm, skip=skip, only=())


def pull_at_warm_path(
    work: Path, store: str, model: Path, flags: list[str], *extra: str
) -> tuple[subprocess.CompletedProcess, float, dict]:
    """A fresh pod at the warm's root path (``work/ci``: nothing there, the pod's caches cleared), then
    :func:`pull_for_server` into it: the documented flow (docs/vllm.md, "pull into the warm's path"), which vLLM
    0.26 needs because it loads compiled pieces from the absolute path the warm saved them at."""
    shutil.rmtree(work / "ci", ignore_errors=True)
    clear_pod()
    return pull_for_server(work, store, work / "ci", model, flags, *extra)


def pull_for_server(
    work: Path, store: str, root: Path, model: Path, flags: list[str], *extra: str
) -> tuple[subprocess.CompletedProcess, float, dict]:
    """``pull`` of the part's bundle into ``root`` with the server's command line (what an init-container runs)."""
    return cli(
        "pull",
        store,
        "--cache-root",
        root,
        "--trust",
        work / "k.pub",
        "--engine",
        "vllm",
        "--json",
        "--",
        model,
        *flags,
        *HEADLESS,
        *extra,
    )


def vllm_rows(
    run: Run,
    work: Path,
    store: str,
    model: Path,
    flags: list[str],
    vllm: str,
    *,
    skip: tuple[str, ...],
    only: tuple[str, ...],
) -> None:
    steps = {
        "perturbed": lambda: perturbed(run, work, store, model, flags, vllm),
        "changed": lambda: changed_flag(run, work, store, model, flags),
        "eager": lambda: eager(run, work, store, model, flags),
        "read-only": lambda: read_only(run, work, store, model, flags, with_server="ro-server" not in skip),
        "moved": lambda: moved(run, work, store, model, flags),
    }
    for name, step in steps.items():
        if name not in skip and (not only or name in only):
            guarded(run, step)


def moved(run: Run, work: Path, store: str, model: Path, flags: list[str]) -> None:
    """The rows above pulled into the warm's path. Here, with nothing at that path (a fresh pod), a pull to another
    path, which refuses (or, for a bundle packed without the saved roots, warns in one line) where vLLM loads its
    pieces from the warm's path (:mod:`cachetool.engines.vllm.piece_paths`), and the real server there. The pull's
    word is held to the server's: on a root it calls bound to the warm's path (refused: an empty root) the server
    should compile (or fail); on one it says nothing of it should compile nothing."""
    from tests.vllm_oracle.server import serve_once

    shutil.rmtree(work / "ci", ignore_errors=True)
    shutil.rmtree(work / "moved", ignore_errors=True)
    clear_pod()
    p, wall, _doc = pull_for_server(work, store, work / "moved", model, flags)
    bound = next((ln for ln in p.stderr.splitlines() if "not relocatable" in ln and "compiled pieces" in ln), None)
    clear_pod()
    srv = serve_once(str(model), work / "moved", [*flags, *HEADLESS], stop_when_compiling=True)
    run.row(
        "vllm",
        "pull to another path, the warm's root gone (fresh pod), then vllm serve there",
        f"pull exit {p.returncode} in {wall:.1f} s, "
        + (f"said: {bound.split('] ', 1)[-1][:220]}" if bound else "said nothing of the path")
        + f"; server {server_word(srv)}, engine init {srv.engine_init_seconds} s, ready {srv.ready_seconds:.1f} s",
        "did not hit" if bound else "compiled nothing",
        "compiled nothing" if server_word(srv) == "compiled nothing" else "did not hit",  # compiled, or failed
        evidence=srv.evidence,
        log=srv.log,
    )
    with contextlib.suppress(OSError, TypeError):  # why it did not start: the server's own log, beside the rows
        shutil.copy(srv.log, run.out / "vllm-moved.log")


def guarded(run: Run, step) -> None:
    """A row's step; a failure of the step itself (not a verdict) is a row of its own, and the part goes on."""
    try:
        step()
    except Exception as exc:  # noqa: BLE001 - the table says what broke, the next row still runs
        import traceback

        run.row("error", "a step failed", f"{type(exc).__name__}: {exc}"[:300])
        run.say(traceback.format_exc()[-2000:])


def perturbed(run: Run, work: Path, store: str, model: Path, flags: list[str], vllm: str) -> None:
    """The pulled root without vLLM's piecewise folder (torch_compile_cache/{hash10}/): the AOT artifact loads, a
    piece compiles again. Check, then the server, each on a root pulled and perturbed again."""
    from tests.vllm_oracle.server import serve_once

    def pull_perturbed() -> None:
        pull_at_warm_path(work, store, model, flags)
        tcc = work / "ci" / "torch_compile_cache"
        for d in tcc.iterdir() if tcc.is_dir() else []:
            if d.name != "torch_aot_compile":
                shutil.rmtree(d)

    pull_perturbed()
    run.say("vllm: check on the perturbed root")
    p, wall, doc = cli(
        "check", "--engine", "vllm", "--cache-root", work / "ci", "--require-hit", "--json", "--", model, *flags
    )
    c = doc.get("start") or doc.get("compile") or doc
    pull_perturbed()
    srv = serve_once(str(model), work / "ci", [*flags, *HEADLESS])
    # both counter sets, each with what the real server did on that root: the pin of a perturbed start
    if c.get("ranks"):
        record_start(
            run,
            "vLLM 0.26 CUDA, Llama-3.2-1B config, check on a pulled root without its piecewise folder",
            vllm,
            c["ranks"],
            c.get("inductor_compiled", 0),
            bool(c.get("key_existed")),
            server_word(srv),
        )
    if srv.reports:
        record_start(
            run,
            "vLLM 0.26 CUDA, Llama-3.2-1B config, vllm serve on a pulled root without its piecewise folder",
            vllm,
            srv.reports,
            srv.new_kernels,
            not srv.new_key_folders,
            server_word(srv),
        )
    run.row(
        "vllm",
        "a pulled root without the piecewise folder",
        f"check exit {p.returncode} ({doc.get('miss_reason') or 'hit'}); server {srv.evidence or 'nothing'}",
        check_word(p, doc),
        server_word(srv),
        counters=srv.vllm_counters,
    )


def changed_flag(run: Run, work: Path, store: str, model: Path, flags: list[str]) -> None:
    from tests.vllm_oracle.server import serve_once

    at = flags.index("--max-model-len") + 1  # vLLM hashes it
    changed = [*flags[:at], str(int(flags[at]) // 2), *flags[at + 1 :]]
    p, wall, _doc = pull_for_server(work, store, work / "changed", model, changed)
    written = file_total(work / "changed")
    pull_at_warm_path(work, store, model, flags)  # the root the server's old command line pulled
    pc, _w, docc = cli("check", "--engine", "vllm", "--cache-root", work / "ci", "--json", "--", model, *changed)
    pull_at_warm_path(work, store, model, flags)
    srv = serve_once(str(model), work / "ci", [*changed, *HEADLESS], stop_when_compiling=True)
    run.row(
        "vllm",
        f"a changed hashed flag (--max-model-len {changed[at]})",
        f"pull exit {p.returncode} in {wall:.1f} s, {written} file(s) written: {error_line(p)[:160]}",
        check_word(pc, docc),
        server_word(srv),
    )


def eager(run: Run, work: Path, store: str, model: Path, flags: list[str]) -> None:
    """An eager server (``-O0``): check answers without vLLM (it compiles no graph), the pull for that command
    installs only the folders that belong to no key (vLLM's own Triton kernels, the model inspection), and the real
    server starts on that pulled root."""
    from tests.vllm_oracle.server import serve_once

    pull_at_warm_path(work, store, model, flags)
    p, wall, doc = cli("check", "--engine", "vllm", "--cache-root", work / "ci", "--json", "--", model, *flags, "-O0")
    pulled, _w, _d = pull_at_warm_path(work, store, model, flags, "-O0")
    srv = serve_once(str(model), work / "ci", [*flags, *HEADLESS, "-O0"])
    run.row(
        "vllm",
        "an eager server (-O0) on its pulled root",
        f"check exit {p.returncode} in {wall:.1f} s; pull exit "
        f"{pulled.returncode}; server engine init {srv.engine_init_seconds} s, {srv.evidence or 'nothing'}",
        check_word(p, doc),
        server_word(srv),
    )


def read_only(run: Run, work: Path, store: str, model: Path, flags: list[str], with_server: bool = True) -> None:
    """The pulled root bind-mounted read-only in a private mount namespace: check and the server (``with_server``
    False: check alone, the server's verdict then the one recorded on the H200 on 2026-12-04, EROFS)."""
    root = work / "ci"
    pull_at_warm_path(work, store, model, flags)
    wrap = [
        "unshare",
        "-m",
        "--propagation",
        "private",
        "bash",
        "-c",
        'mount --bind "$RO" "$RO" && mount -o remount,bind,ro "$RO" && exec "$@"',
        "bash",
    ]
    probe = subprocess.run([*wrap, "true"], env={**os.environ, "RO": str(root)}, capture_output=True, text=True)
    if probe.returncode != 0:
        run.row("vllm", "the pulled root read-only", f"not run: no read-only bind mount here ({probe.stderr[-120:]})")
        return
    p = subprocess.run(
        [
            *wrap,
            sys.executable,
            "-m",
            "cachetool",
            "check",
            "--engine",
            "vllm",
            "--cache-root",
            str(root),
            "--require-hit",
            "--",
            str(model),
            *flags,
        ],
        env={**os.environ, "RO": str(root)},
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    if not with_server:
        run.row(
            "vllm",
            "the pulled root read-only",
            f"check exit {p.returncode}: {error_line(p)[:200]}; server not "
            "started here (2026-12-04 on the H200: 'Read-only file system')",
            "failed to start" if p.returncode == 2 else "started",
            None,
        )
        return
    clear_pod()
    from cachetool.engines.vllm.engine import VllmEngine
    from cachetool.process_tree import end_group
    from tests.vllm_oracle.server import free_port

    env = {**os.environ, **VllmEngine().server_environment(root), "RO": str(root), "HF_HUB_OFFLINE": "1"}
    log, port = work / "ro-serve.log", free_port()
    t0 = time.perf_counter()
    with open(log, "wb") as f:
        s = subprocess.Popen(
            [
                *wrap,
                sys.executable,
                "-m",
                "vllm.entrypoints.cli.main",
                "serve",
                str(model),
                *flags,
                *HEADLESS,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        up = wait_health(s, port, 240, log)
        end_group(s.pid, grace=10)
        s.wait()
    text = log.read_text(errors="replace")
    died = " (Read-only file system)" if "Read-only file system" in text else ""
    run.row(
        "vllm",
        "the pulled root read-only",
        f"check exit {p.returncode}: {error_line(p)[:200]}; server "
        f"{'up' if up else f'exit {s.returncode}'} after {time.perf_counter() - t0:.0f} s{died}",
        "failed to start" if p.returncode == 2 else "started",
        "started" if up else "failed to start",
        log=str(log),
    )


def wait_health(proc: subprocess.Popen, port: int, timeout: float, log: Path) -> bool:
    """Whether the server answers /health within ``timeout``; False at once when it exits or its log shows that
    its engine failed (vLLM's API server stays up a while after its engine core died)."""
    import urllib.request

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout and proc.poll() is None:
        text = log.read_text(errors="replace") if log.exists() else ""
        if "Read-only file system" in text or "initialization failed" in text:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(1)
    return False


# ------------------------------------------------------------------------------------------------ FP8 MoE rows
def moe_model(work: Path, cpu: bool, kind: str = "moe") -> tuple[Path, list[str]]:
    """The FP8 model (``kind``: moe or dense) and its flags (``cpu``: the tiny Llama and its CPU flags instead: a
    dry run of the rows)."""
    from tests.vllm_oracle.tiny import CPU_FLAGS, write_model

    if cpu:
        return write_model(work / "models" / "tiny"), list(CPU_FLAGS)
    folder = work / "models" / f"fp8-{kind}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(FP8_MODELS[kind]))
    return folder, list(MOE_FLAGS)


def moe_serve(
    run: Run, name: str, root: Path, model: Path, flags: list[str], cold: float | None, part: str = "moe"
) -> float:
    from cachetool.engines.vllm.install_facts import vllm_version
    from tests.vllm_oracle.server import serve_once

    files0 = file_set(root)
    run.say(f"{part}: vllm serve ({name})")
    srv = serve_once(str(model), root, [*flags, *HEADLESS], timeout=520)
    init = srv.engine_init_seconds or -1.0
    ratio = f" ({init / cold:.3f}x cold)" if cold and init > 0 else ""
    run.row(
        part,
        name,
        f"engine init {init:.1f} s{ratio}, /health {srv.ready_seconds:.1f} s, JIT files in root "
        f"+{len(file_set(root) - files0)}, outside {srv.written_outside or 0}, answered {bool(srv.completion)}",
        None,
        server_word(srv),
        evidence=srv.evidence,
        log=srv.log,
        counters=srv.vllm_counters,
        engine_init=init,
        ready=srv.ready_seconds,
        added_in_root=sorted(file_set(root) - files0)[:40],
    )
    shutil.copy(srv.log, run.out / f"{part}-{name.split()[0]}.log")
    vllm = vllm_version()
    record_start(
        run,
        f"vLLM {vllm}, FP8 {part} config, vllm serve: {name}",
        vllm,
        srv.reports,
        srv.new_kernels,
        not srv.new_key_folders,
        server_word(srv),
    )
    return init


def part_moe_cold(run: Run, work: Path, cpu: bool = False, kind: str = "moe") -> None:
    """Stock ``vllm serve`` cold on the FP8 model ``kind`` (moe, dense): an empty root of a fresh pod."""
    model, flags = moe_model(work, cpu, kind)
    root = work / "moe-root"
    shutil.rmtree(root, ignore_errors=True)
    clear_pod()
    cold = moe_serve(run, "cold (stock vLLM, fresh pod, empty root)", root, model, flags, None, kind)
    (work / f"{kind}-cold.json").write_text(json.dumps({"cold": cold}))


def part_moe_pulled(run: Run, work: Path, cpu: bool = False, kind: str = "moe") -> None:
    """After ``{kind}-cold`` in the same lease: kept, warm with ``--push`` on the kept root, and the pulled rows."""
    model, flags = moe_model(work, cpu, kind)
    root = work / "moe-root"
    cold_file = work / f"{kind}-cold.json"
    cold = json.loads(cold_file.read_text())["cold"] if cold_file.exists() else None
    store = f"file://{work}/store/{kind}:gpu"
    moe_serve(run, "kept (every cache kept)", root, model, flags, cold, kind)
    run.say(f"{kind}: warm on the kept root (records the facts), push")
    p, wall, doc = warm_push(work, root, store, model, flags)
    run.row(
        kind,
        "warm --push (on the kept root)",
        f"exit {p.returncode}, wall {wall:.1f} s, bytes "
        f"{doc.get('bytes')}: {error_line(p)[:160] if p.returncode else 'ok'}",
    )
    moe_pulled_rows(run, work, store, model, flags, cold, deadline=None, part=kind)


def part_moe(
    run: Run, work: Path, cpu: bool = False, budget: float = 560.0, kind: str = "moe", serve_cold: bool = True
) -> None:
    """The FP8 rows of one model (``kind``: moe, dense) in one call: stock ``vllm serve`` cold (a fresh pod, an
    empty root), the same server again with every cache kept, the warm on that root with ``--push`` (a hot start
    that records the facts), a fresh pod at the same path, pull, the real server with the printed environment, and
    check while the call's ``budget`` seconds allow. Without ``serve_cold`` the warm is the cold start (on an empty
    root of a fresh pod) and the two stock rows are left out: the pulled rows in less device time."""
    t0 = time.perf_counter()
    model, flags = moe_model(work, cpu, kind)
    root = work / "moe-root"
    shutil.rmtree(root, ignore_errors=True)
    clear_pod()
    cold = None
    if serve_cold:
        cold = moe_serve(run, "cold (stock vLLM, fresh pod, empty root)", root, model, flags, None, kind)
        moe_serve(run, "kept (stock vLLM, every cache kept)", root, model, flags, cold, kind)
    store = f"file://{work}/store/{kind}:gpu"
    name = "warm --push (on the kept root)" if serve_cold else "warm --push (cold: fresh pod, empty root)"
    run.say(f"{kind}: {name}")
    p, wall, doc = warm_push(work, root, store, model, flags)
    (run.out / f"{kind}-warm.err").write_text(p.stderr[-30_000:])
    c = doc.get("compile", doc)
    init = c.get("startup_seconds") or -1.0
    run.row(
        kind,
        name,
        f"exit {p.returncode}, wall {wall:.1f} s, engine init {init:.1f} s, compiled "
        f"{c.get('compiled')}, outside {c.get('written_outside') or 0}, pushed {doc.get('bytes')}"
        + (f": {error_line(p)[:300]}" if p.returncode else ""),
        "compiled nothing" if p.returncode == 0 and not c.get("compiled") else "compiled",
        None,
    )
    if p.returncode != 0:
        run.row(kind, "pull, the pulled server and check", "not run: the warm failed")
    else:
        moe_pulled_rows(run, work, store, model, flags, cold if serve_cold else init, deadline=t0 + budget, part=kind)


CHECK_SECONDS_AT_LEAST = 70  # what `dense --no-stock` leaves of its 560 s (75-80 s on the H100) fits its 70 s check


def moe_pulled_rows(
    run: Run,
    work: Path,
    store: str,
    model: Path,
    flags: list[str],
    cold: float | None,
    deadline: float | None,
    part: str = "moe",
) -> None:
    """A fresh pod at the warm's root path (FlashInfer's rule): pull with the server's argv, the real server with
    the printed environment, and check on the pulled root as the pull left it (skipped when ``deadline`` is too
    near)."""
    from cachetool.engines.vllm.install_facts import vllm_version

    root = work / "moe-root"
    shutil.rmtree(root)  # a fresh pod: the same path, nothing in it
    clear_pod()
    p, wall, doc = pull_for_server(work, store, root, model, flags)
    run.row(
        part,
        "pull with the server's argv",
        f"exit {p.returncode}, {wall:.2f} s wall" + (f": {error_line(p)[:300]}" if p.returncode else ""),
        server_env=doc.get("server_env"),
    )
    shutil.rmtree(work / "moe-check", ignore_errors=True)
    shutil.copytree(root, work / "moe-check", symlinks=True)
    moe_serve(run, "pulled (fresh pod, vllm serve with the printed environment)", root, model, flags, cold, part)
    left = None if deadline is None else deadline - time.perf_counter()
    # a check on a pulled FP8 root took 42 s (MoE) and 68-70 s (dense) on the H100; it runs under what is left, and
    # one cut short by the deadline says "not finished" in its row
    if left is not None and left < CHECK_SECONDS_AT_LEAST:
        run.row(part, "check --require-hit on the pulled root", "not run: the call's time was spent")
        return
    # check on the pulled root as pull left it, at its own path (FlashInfer's JIT modules are bound to it), and not
    # on the root the server above added files to
    shutil.rmtree(root)
    shutil.copytree(work / "moe-check", root, symlinks=True)
    clear_pod()
    try:
        p, wall, doc = cli(
            "check",
            "--engine",
            "vllm",
            "--cache-root",
            root,
            "--require-hit",
            "--json",
            "--",
            model,
            *flags,
            timeout=left or 900,
        )
    except subprocess.TimeoutExpired:
        run.row(part, "check --require-hit on the pulled root", "not finished: the call's time was spent")
        return
    rows = [json.loads(ln) for ln in (run.out / "rows.jsonl").read_text().splitlines()]
    server = next((r["server"] for r in reversed(rows) if r["part"] == part and r["row"].startswith("pulled")), None)
    c = doc.get("compile") or doc
    if c.get("ranks"):  # an FP8 hit's counters (tests/engines/vllm/recorded_starts.json keeps such sets)
        vllm = vllm_version()
        record_start(
            run,
            f"vLLM {vllm}, FP8 {part} config, check on the pulled root",
            vllm,
            c["ranks"],
            c.get("inductor_compiled", 0),
            bool(c.get("key_existed")),
            check_word(p, doc),
        )
    run.row(
        part,
        "check --require-hit on the pulled root",
        f"exit {p.returncode}, {wall:.1f} s wall: {c.get('miss_reason') or 'hit'}",
        check_word(p, doc),
        server,
    )


def key_factor_files(root: Path) -> dict[str, dict]:
    """vLLM's ``cache_key_factors.json`` of every key folder under ``root``, by path (env, config, code and
    compiler hashes: which one moved)."""
    out = {}
    for path in sorted(root.glob("torch_compile_cache/*/rank_*/*/cache_key_factors.json")):
        with contextlib.suppress(OSError, ValueError):
            out[str(path.relative_to(root))] = json.loads(path.read_text())
    return out


def part_moe_moved(run: Run, work: Path, cpu: bool = False) -> None:
    """After ``moe`` (the same lease): the pulled root copied to another path with the warm's path emptied (a fresh
    pod), check there, and what differs between a key folder vLLM made there and the warm's, if it made one:
    whether vLLM's key of an FP8 MoE root depends on its path (beyond FlashInfer's JIT modules and vLLM 0.26's
    path rule for compiled pieces, which the ``moved`` row of the vllm part measures)."""
    model, flags = moe_model(work, cpu)
    if not (work / "moe-check").is_dir():
        run.row("moe", "check on a copy at another path", "not run: no pulled root left by the moe part")
        return
    moved = work / "moe-moved"
    shutil.rmtree(moved, ignore_errors=True)
    shutil.copytree(work / "moe-check", moved, symlinks=True)
    shutil.rmtree(work / "moe-root", ignore_errors=True)  # nothing left at the path the pieces were saved at
    clear_pod()
    logs = Path(os.environ.get("XDG_STATE_HOME", "~/.local/state")).expanduser() / "cachetool" / "logs"
    seen = set(logs.glob("vllm-*.log"))
    # at vLLM's own log level: DEBUG turns Inductor's asserts on under torch < 2.12, another key folder (seen here)
    p, wall, doc = cli("check", "--engine", "vllm", "--cache-root", moved, "--json", "--", model, *flags)
    warm_keys, moved_keys = key_factor_files(work / "moe-check"), key_factor_files(moved)
    (run.out / "moe-moved-keys.json").write_text(json.dumps({"warm": warm_keys, "moved": moved_keys}, indent=1))
    new = [k for k in moved_keys if k not in warm_keys]
    differ = []
    if new and warm_keys:
        a, b = next(iter(warm_keys.values())), moved_keys[new[0]]
        differ = [f for f in ("config_hash", "code_hash", "compiler_hash") if a.get(f) != b.get(f)]
        env_a, env_b = a.get("env") or {}, b.get("env") or {}
        differ += [f"env {n}" for n in sorted(set(env_a) | set(env_b)) if env_a.get(n) != env_b.get(n)]
    for log in set(logs.glob("vllm-*.log")) - seen:
        lines = log.read_text(errors="replace").splitlines()
        keep = [ln for ln in lines if "cache directory" in ln or "load" in ln.lower() or "Compiling" in ln]
        (run.out / f"moe-moved-{log.stem}.txt").write_text("\n".join(keep[-600:]))
    run.row(
        "moe",
        "check on a copy of the pulled root at another path (diagnosis)",
        f"exit {p.returncode}, {wall:.1f} s: {(doc.get('compile') or doc).get('miss_reason') or 'hit'}; "
        f"new key folder(s) {[k.split('/')[1] for k in new]}; differs from the warm's: {differ or 'nothing'}",
        check_word(p, doc),
        None,
    )


# ------------------------------------------------------------------------------------------------ native, torch
def benchmark(run: Run, script: str, *args: str) -> subprocess.CompletedProcess:
    """One of the benchmarks of this folder, its output saved beside the rows."""
    run.say(f"{script} {' '.join(args)}")
    p = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )
    (run.out / f"{Path(script).stem}.log").write_text(p.stdout[-200_000:] + p.stderr[-20_000:])
    return p


def part_native(run: Run, cpu: bool = False) -> None:
    """This project's pipeline: the AOT hot start against stock torch.compile's warm start (its local cache kept)
    and Mega-Cache, one fresh process each (benchmarks/bench_startup.py)."""
    model, device = ("tiny", "cpu") if cpu else ("llama-3.2-1b", "cuda")
    out = run.out / "native.json"
    p = benchmark(
        run,
        "bench_startup.py",
        "--model",
        model,
        "--device",
        device,
        "--pycache",
        "/tmp/pyc",
        "--compilation-config",
        '{"cudagraph_mode": "NONE"}',
        "--json",
        str(out),
    )
    if p.returncode != 0 or not out.exists():
        run.row("native", "AOT hot start", f"bench_startup failed (exit {p.returncode}): {p.stderr.strip()[-200:]}")
        return
    rows = {r["variant"]: r for r in json.loads(out.read_text())}
    aot = next(r for name, r in rows.items() if name.startswith("hot, AOT"))
    warm = rows["stock torch.compile, warm"]
    run.row(
        "native",
        f"AOT hot start vs stock warm ({model}, graphs NONE)",
        f"start-up {aot['startup_s']:.2f} s vs "
        f"{warm['startup_s']:.2f} s ({aot['startup_s'] / warm['startup_s']:.2f}x); exec to first forward "
        f"{aot['ready_s']:.2f} vs {warm['ready_s']:.2f} s; compiled {aot['compiled']}",
        "compiled nothing" if aot["compiled"] == 0 else "compiled",
        None,
    )


TORCH_MODES = ("default", "max-autotune-no-cudagraphs")
TORCH_ALONE_RUNS = 3  # max-autotune: starts of the program alone, each on a fresh pull (run-time tuning is noisy)


def part_torch(run: Run, cpu: bool = False, modes: tuple[str, ...] = TORCH_MODES) -> None:
    """The torch engine on a program it knows nothing of (benchmarks/bench_torch_engine.py: a small GPT, bf16 on the
    GPU), in each of ``modes`` (default mode and max-autotune unless ``--modes`` says): cold (a warm), then a pulled
    root at another path in a fresh pod, checked by running the program again (its probe counts what it compiled:
    FX graphs, kernels, autotuning)."""
    device = "cpu" if cpu else "cuda"
    for mode in ("default",) if cpu else modes:
        out = run.out / f"torch-{mode}.json"
        alone = "1" if cpu or mode == "default" else str(TORCH_ALONE_RUNS)
        p = benchmark(
            run,
            "bench_torch_engine.py",
            "--device",
            device,
            "--fresh-pod",
            "--mode",
            mode,
            "--alone",
            alone,
            "--json",
            str(out),
        )
        if p.returncode != 0 or not out.exists():
            run.row("torch", f"mode {mode}", f"bench_torch_engine failed (exit {p.returncode})")
            continue
        rows = json.loads(out.read_text())["rows"]
        cold, pulled, alone = rows["cold"], rows["pulled"], rows.get("server")
        ready = pulled["program"]["ready_s"]
        runs = [] if alone is None else alone.get("runs") or [alone]
        built = None if alone is None else alone["cpp_kernels_built"] + max(r["triton_kernels_built"] for r in runs)
        run.row(
            "torch",
            f"mode {mode}: check on a pulled root, fresh pod; the program alone with pull's environment",
            f"check: ready {ready:.2f} s vs cold {cold['program']['ready_s']:.2f} s, built "
            f"{pulled.get('triton_kernels_built')} Triton / {pulled.get('cpp_kernels_built')} C++ kernels, "
            f"{pulled.get('autotune_benchmarks')} autotunings; the program alone: "
            + (
                "not run"
                if alone is None
                else f"ready {alone['program']['ready_s']:.2f} s, {len(runs)} run(s) on fresh pulls built "
                f"{[r['triton_kernels_built'] for r in runs]} Triton kernel(s) "
                f"{sorted({n for r in runs for n in r.get('triton_kernels_built_names', [])})}, coordinate descent "
                f"tuned {sorted({n for r in runs for n in r.get('coordesc_tuned', [])}) or 'nothing'}, "
                f"{alone['autotune_results_written']} autotune result(s) written, environment "
                f"{sorted(alone['environment'])}"
            ),
            "compiled nothing" if pulled.get("hit") else "compiled",
            None if alone is None else ("compiled nothing" if built == 0 else "compiled"),
        )


# ------------------------------------------------------------------------------------------------ the table
def part_table(run: Run) -> None:
    rows = [json.loads(ln) for ln in (run.out / "rows.jsonl").read_text().splitlines() if ln.strip()]
    print("\n| part | row | figure | cachetool | server | check = server |\n|---|---|---|---|---|---|")
    for r in rows:
        eq = {True: "yes", False: "**NO**", None: "-"}[r["equal"]]
        print(f"| {r['part']} | {r['row']} | {r['figure']} | {r['cachetool'] or '-'} | {r['server'] or '-'} | {eq} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "part",
        choices=(
            "native",
            "torch",
            "vllm",
            "moe",
            "dense",
            "moe-cold",
            "moe-pulled",
            "moe-moved",
            "dense-cold",
            "dense-pulled",
            "table",
        ),
    )
    ap.add_argument("--only", default="", help="vllm part: these rows again, on what an earlier run left in --work")
    ap.add_argument(
        "--skip",
        default="",
        help="vllm part: rows to leave out (perturbed, changed, eager, read-only, ro-server, moved), comma-separated",
    )
    ap.add_argument(
        "--modes", default=",".join(TORCH_MODES), help="torch part: the torch.compile modes to run, comma-separated"
    )
    ap.add_argument("--out", type=Path, required=True, help="rows.jsonl, progress.log and logs go here")
    ap.add_argument("--work", type=Path, default=Path("/tmp/gpu-acceptance"), help="roots, store, models")
    ap.add_argument("--cpu", action="store_true", help="the tiny Llama on the CPU instead (a dry run of the rows)")
    ap.add_argument(
        "--no-stock",
        action="store_true",
        help="moe, dense: leave out the stock cold and kept servers "
        "(the warm is the cold start): the pulled rows in less device time",
    )
    args = ap.parse_args()
    if not any(args.modes.split(",")):
        ap.error("--modes: name at least one torch.compile mode")
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    run = Run(args.out)
    {
        "vllm": lambda: part_vllm(
            run,
            args.work,
            args.cpu,
            tuple(filter(None, args.skip.split(","))),
            tuple(filter(None, args.only.split(","))),
        ),
        "moe": lambda: part_moe(run, args.work, args.cpu, serve_cold=not args.no_stock),
        "dense": lambda: part_moe(run, args.work, args.cpu, kind="dense", serve_cold=not args.no_stock),
        "native": lambda: part_native(run, args.cpu),
        "torch": lambda: part_torch(run, args.cpu, tuple(filter(None, args.modes.split(",")))),
        "moe-cold": lambda: part_moe_cold(run, args.work, args.cpu),
        "moe-pulled": lambda: part_moe_pulled(run, args.work, args.cpu),
        "moe-moved": lambda: part_moe_moved(run, args.work, args.cpu),
        "dense-cold": lambda: part_moe_cold(run, args.work, args.cpu, kind="dense"),
        "dense-pulled": lambda: part_moe_pulled(run, args.work, args.cpu, kind="dense"),
        "table": lambda: part_table(run),
    }[args.part]()


if __name__ == "__main__":
    main()
