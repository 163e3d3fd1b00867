"""Start-up side by side: what a user can do without us vs a hot start from this pipeline's cache.

    python benchmarks/bench_startup.py --model tiny --device cpu
    python benchmarks/bench_startup.py --model llama-3.2-1b --device cuda --compilation-config '{"cudagraph_mode":"NONE"}'

One run, each variant its own fresh Python process, in this order:

1. ``stock cold``: ``torch.compile(fullgraph=True)`` (same dynamic token dim), empty Inductor/Triton caches;
2. ``stock warm``: the same again, its local Inductor cache simply kept (a persisted volume: no tool needed);
3. ``Mega-Cache``: PyTorch's ``save_cache_artifacts()`` from (1), ``load_cache_artifacts()`` into empty caches
   (counted in start-up), then ``torch.compile``;
4. ``pipeline cold``: this pipeline (mode 3) into an empty root: compiles and writes the AOT entry (a warm);
5. ``hot, Dynamo path``: a copy of that root without the AOT entry: Dynamo traces, every piece is loaded;
6. ``hot, AOT entry``: the root as warmed: the AOT entry is loaded, no Dynamo trace.

``start-up`` is model built → first forward done on the dummy batch (compile/load and CUDA-graph capture
included, capture also shown apart); ``ready`` is the child's exec → first forward done (interpreter, imports,
build, start-up: a user's "time to ready"); ``process`` is the child's whole wall time (imports, build, a short
workload, exit) and ``exit`` the part of it after the worker's last line (interpreter teardown).
``same`` compares the workload's checksum (prefill and decode of 7, 64, 2 and 1 tokens) with the cold run of
the same kind (stock with stock cold, pipeline with pipeline cold). ``TORCHINDUCTOR_VEC_ISA_OK=1`` is set for
every variant (it skips a per-process CPU ISA build check that all would pay alike). ``--pycache DIR`` sets
``PYTHONPYCACHEPREFIX`` for every process and primes it first (the H200 image ships torch without ``.pyc``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULT = "BENCH_RESULT "


# ---------------------------------------------------------------------- the worker (one variant, one process)


def worker(args: argparse.Namespace) -> None:
    import torch

    from compiler import torch_compat
    from compiler.config import CompilationConfig
    from compiler.counters import counters
    from compiler.runner import ModelRunner

    mega_load = 0.0
    if args.load_mega:
        t = time.perf_counter()
        torch.compiler.load_cache_artifacts(Path(args.load_mega).read_bytes())
        mega_load = time.perf_counter() - t
    cfg = CompilationConfig.from_dict(
        {**json.loads(args.compilation_config), "mode": args.mode, "cache_dir": args.root}
    )
    t0 = time.perf_counter()
    runner = ModelRunner(
        args.model,
        args.device,
        cfg,
        max_num_batched_tokens=args.max_tokens,
        max_model_len=max(256, args.max_tokens),
        max_num_seqs=4,
        save_aot_entry=True if args.warm else None,
    )
    build = time.perf_counter() - t0
    t_built = time.time()
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        startup = prof.runcall(runner.warmup)
        with open(args.profile, "w") as f:
            stats = pstats.Stats(prof, stream=f).sort_stats("cumulative")
            stats.print_stats(120)
            stats.print_callers(r"\(<module>\)", 40)  # who imports what on the critical path
    else:
        startup = runner.warmup()
    ready_at = time.time()  # exec → first forward done, with the driver's spawn time
    wl = runner.run_workload()
    if args.save_mega:
        Path(args.save_mega).write_bytes(torch.compiler.save_cache_artifacts()[0])
    inductor = torch_compat.dynamo_counters()["inductor"]
    state = runner.compile_state
    stock = args.mode == 1
    out = {
        "build_s": round(build, 3),
        "startup_s": round(startup + mega_load, 3),
        "mega_load_s": round(mega_load, 3),
        "capture_s": round(runner.graphs.capture_seconds, 3),
        "compiled": int(inductor.get("fxgraph_cache_miss", 0)) if stock else counters.graphs_compiled,
        "loaded": int(inductor.get("fxgraph_cache_hit", 0)) if stock else counters.graphs_loaded,
        "dynamo_traces": int(torch_compat.dynamo_counters()["stats"].get("unique_graphs", 0))
        if stock
        else counters.dynamo_traces,
        "hot_path": getattr(state, "hot_path", None),
        "phases": startup_phases(state, startup, runner),
        "key_source": getattr(state, "key_source", None),
        "loader": dict(torch_compat.hot_load_report),
        "checksum": wl.checksum,
        "ready_at": ready_at,
        "build_at": t_built,
    }
    out["done_at"] = time.time()
    print(RESULT + json.dumps(out), flush=True)


def startup_phases(state, startup: float, runner) -> dict:  # noqa: ANN001
    """The start-up's phases as ``check --json`` names them (key, trace, compile, load, save, capture), the
    warm-up batches being the rest (``first_forward``)."""
    phases = dict(state.phases.as_dict()) if state is not None else {}
    phases["cudagraph_capture"] = round(runner.graphs.capture_seconds, 3)
    phases["first_forward"] = round(max(0.0, startup - sum(phases.values())), 3)
    return {k: v for k, v in phases.items() if v}


# ---------------------------------------------------------------------- the driver


def child_env(args: argparse.Namespace, inductor_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["TORCHINDUCTOR_VEC_ISA_OK"] = "1"
    env["TORCHINDUCTOR_CACHE_DIR"] = str(inductor_dir)  # stock variants; mode 3 redirects into its root
    env["TRITON_CACHE_DIR"] = str(inductor_dir / "triton")
    env.pop("CACHETOOL_DISABLE_COMPILE_CACHE", None)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    if args.pycache:
        env["PYTHONPYCACHEPREFIX"] = str(Path(args.pycache).resolve())
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # else the prefix is never written
    return env


def run_variant(
    name: str, args: argparse.Namespace, *, mode: int, root: Path, inductor_dir: Path, extra: list[str] = ()
) -> dict:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        "--mode",
        str(mode),
        "--root",
        str(root),
        "--model",
        args.model,
        "--device",
        args.device,
        "--max-tokens",
        str(args.max_tokens),
        "--compilation-config",
        args.compilation_config,
        *extra,
    ]
    t0 = time.perf_counter()
    spawned = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env(args, inductor_dir), cwd=str(REPO))
    wall = time.perf_counter() - t0
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT)), None)
    if proc.returncode != 0 or line is None:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"{name}: worker failed (exit {proc.returncode})")
    result = json.loads(line[len(RESULT) :])
    result.update(
        variant=name,
        process_s=round(wall, 3),
        ready_s=round(result["ready_at"] - spawned, 3),
        to_build_s=round(result["build_at"] - spawned - result["build_s"], 3),
        exit_s=round(spawned + wall - result["done_at"], 3),
    )
    print(
        f"  done: {name}: start-up {result['startup_s']:.2f} s, exec → first forward {result['ready_s']:.2f} s, "
        f"process {wall:.2f} s (exec → build {result['to_build_s']:.2f}, build {result['build_s']:.2f}, exit "
        f"{result['exit_s']:.2f}), compiled {result['compiled']}, loaded {result['loaded']}, traces "
        f"{result['dynamo_traces']}, phases {result['phases']}, key {result['key_source']}, "
        f"loader {result['loader']}",
        flush=True,
    )
    return result


PRIMED_MODULES = (
    "torch",
    "torch._dynamo",
    "torch._dynamo.aot_compile",
    "torch._inductor.compile_fx",
    "torch._inductor.standalone_compile",
    "torch._functorch._aot_autograd.autograd_cache",
    "torch._inductor.codegen.triton",
    "compiler.runner",
    "compiler.piecewise_backend",
)


def prime_pycache(args: argparse.Namespace, base: Path) -> None:
    """One throw-away process that imports what every variant imports, writing the ``.pyc`` files that each would
    otherwise compile itself (modules first imported by a compile are written by the cold variants)."""
    code = f"import importlib\nfor m in {PRIMED_MODULES!r}: importlib.import_module(m)"
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", code], check=True, env=child_env(args, base / "prime_inductor"), cwd=str(REPO)
    )
    print(f"  primed the bytecode cache in {time.perf_counter() - t0:.1f} s", flush=True)


def run_all(args: argparse.Namespace, base: Path) -> list[dict]:
    stock_dir, mega_dir = base / "stock_inductor", base / "mega_inductor"
    mega = base / "mega.bin"
    root, no_entry = base / "root", base / "root_no_entry"
    rows = [
        run_variant(
            "stock torch.compile, cold",
            args,
            mode=1,
            root=base / "unused",
            inductor_dir=stock_dir,
            extra=["--save-mega", str(mega)],
        ),
        run_variant("stock torch.compile, warm", args, mode=1, root=base / "unused", inductor_dir=stock_dir),
        run_variant(
            "Mega-Cache (load_cache_artifacts)",
            args,
            mode=1,
            root=base / "unused",
            inductor_dir=mega_dir,
            extra=["--load-mega", str(mega)],
        ),
        run_variant(
            "pipeline cold (warm)", args, mode=3, root=root, inductor_dir=base / "p_inductor", extra=["--warm"]
        ),
    ]
    shutil.copytree(root, no_entry, symlinks=True)
    for entry in no_entry.rglob("aot_entry.bin"):
        entry.unlink()
    rows.append(run_variant("hot, Dynamo path", args, mode=3, root=no_entry, inductor_dir=base / "d_inductor"))
    rows.append(run_variant("hot, AOT entry", args, mode=3, root=root, inductor_dir=base / "a_inductor"))
    if args.profile_dir:  # one more AOT start under cProfile (not in the table: the profiler slows it)
        Path(args.profile_dir).mkdir(parents=True, exist_ok=True)
        run_variant(
            "hot, AOT entry (profiled)",
            args,
            mode=3,
            root=root,
            inductor_dir=base / "a2_inductor",
            extra=["--profile", str(Path(args.profile_dir) / "aot_hot_start.prof.txt")],
        )
    return rows


def print_table(rows: list[dict], args: argparse.Namespace) -> None:
    import torch

    print(
        f"model {args.model} on {args.device} · torch {torch.__version__} · {os.cpu_count()} CPUs · "
        f"compilation config {args.compilation_config} · start-up batch {args.max_tokens} tokens · "
        f"PYTHONPYCACHEPREFIX={'set, primed' if args.pycache else 'unset'}"
    )
    header = (
        f"{'variant':<34} {'start-up s':>10} {'capture s':>9} {'ready s':>8} {'process s':>9} "
        f"{'exit s':>6} {'compiled':>8} {'loaded':>6} {'traces':>6} {'same':>5}"
    )
    print(header)
    print("-" * len(header))
    cold = {1: rows[0]["checksum"], 3: rows[3]["checksum"]}
    for i, r in enumerate(rows):
        same = r["checksum"] == (cold[1] if i < 3 else cold[3])
        print(
            f"{r['variant']:<34} {r['startup_s']:>10.2f} {r['capture_s']:>9.2f} {r['ready_s']:>8.2f} "
            f"{r['process_s']:>9.2f} {r['exit_s']:>6.2f} {r['compiled']:>8} {r['loaded']:>6} "
            f"{r['dynamo_traces']:>6} {'yes' if same else 'NO':>5}"
        )
    aot, stock_warm, mega = rows[5], rows[1], rows[2]
    best = min(stock_warm["startup_s"], mega["startup_s"])
    print(
        f"AOT hot start {aot['startup_s']:.2f} s: {stock_warm['startup_s'] / aot['startup_s']:.1f}x faster than "
        f"stock warm, {mega['startup_s'] / aot['startup_s']:.1f}x than Mega-Cache, "
        f"{best / aot['startup_s']:.1f}x than the best of them; exec → first forward {aot['ready_s']:.2f} s vs "
        f"stock warm's {stock_warm['ready_s']:.2f} s ({aot['ready_s'] / stock_warm['ready_s']:.2f})"
    )
    print(
        "phases of the hot starts (s): "
        + " | ".join(
            f"{r['variant']}: exec → build {r['to_build_s']:.2f}, build {r['build_s']:.2f}, "
            + ", ".join(f"{k} {v:.2f}" for k, v in r["phases"].items())
            for r in rows[4:]
        )
    )
    print(f"AOT start: key from {aot['key_source']}; loader {aot['loader']}")
    for line in target_lines(args, aot, stock_warm):
        print(line)


# Issue 21's targets on the H200: (model, graphs) -> the AOT start-up bound in seconds.
H200_TARGETS = {("llama-3.2-1b", "NONE"): 1.0, ("llama-3.2-1b", "default"): 1.6, ("llama-3.1-8b", "NONE"): 1.3}


def target_lines(args: argparse.Namespace, aot: dict, stock_warm: dict) -> list[str]:
    ratio = stock_warm["startup_s"] / aot["startup_s"]
    if not args.device.startswith("cuda"):
        return [
            f"target (CPU): AOT hot start >= 3x faster than stock warm: {'met' if ratio >= 3 else 'MISSED'} "
            f"({ratio:.1f}x)"
        ]
    graphs = json.loads(args.compilation_config).get("cudagraph_mode") or "default"
    bound = H200_TARGETS.get((args.model, graphs))
    lines = []
    if bound is not None:
        ok = aot["startup_s"] <= bound and (graphs != "NONE" or args.model != "llama-3.2-1b" or ratio >= 5)
        lines.append(
            f"target (H200, {args.model}, graphs {graphs}): AOT hot start <= {bound} s"
            + (" and >= 5x stock warm" if (args.model, graphs) == ("llama-3.2-1b", "NONE") else "")
            + f": {'met' if ok else 'MISSED'} ({aot['startup_s']:.2f} s, {ratio:.1f}x)"
        )
    share = aot["ready_s"] / stock_warm["ready_s"]
    lines.append(
        f"target (H200): exec → first forward of the AOT start <= 0.5x stock warm's: "
        f"{'met' if share <= 0.5 else 'MISSED'} ({share:.2f})"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny")
    p.add_argument("--device", default="cpu")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens of the dummy start-up batch")
    p.add_argument("--compilation-config", default="{}", help="CompilationConfig fields for every variant (JSON)")
    p.add_argument("--root", default=None, help="work folder (default: a temporary one, removed afterwards)")
    p.add_argument("--pycache", default=None, help="PYTHONPYCACHEPREFIX for every process (primed first)")
    p.add_argument("--json", default=None, help="also write the rows as JSON to this file")
    p.add_argument("--profile-dir", default=None, help="also profile one AOT hot start (cProfile text file here)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mode", type=int, default=3, help=argparse.SUPPRESS)
    p.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--save-mega", default=None, help=argparse.SUPPRESS)
    p.add_argument("--load-mega", default=None, help=argparse.SUPPRESS)
    p.add_argument("--profile", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    with tempfile.TemporaryDirectory(prefix="bench_startup_", dir=args.root) as tmp:
        if args.pycache and not any(Path(args.pycache).glob("*")):
            prime_pycache(args, Path(tmp))
        rows = run_all(args, Path(tmp))
    print_table(rows, args)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
