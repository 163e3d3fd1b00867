"""Start-up benchmark: stock torch.compile (cold) vs this pipeline cold vs this pipeline hot (second process).

    python benchmarks/bench_compile.py --model tiny --device cpu
    python benchmarks/bench_compile.py --model llama-3.2-1b --device cuda      # on the H200

Each variant runs in its own fresh Python process, as a server start would:

- ``stock cold``: ``torch.compile(fullgraph=True)`` with the same dynamic token dim, an empty Inductor cache;
- ``pipeline cold``: mode 3 (split at attention, identical pieces compiled once) into an empty cache root;
- ``pipeline hot``: mode 3 again on that root in a new process: loads every piece, compiles nothing.

``start-up`` is the first forward on a dummy batch of ``--max-tokens`` tokens (compile or load included): what a
server waits for before it can serve. ``process`` is the child's wall time including imports, model build and a
short prefill/decode workload. ``TORCHINDUCTOR_VEC_ISA_OK=1`` is set for every variant unless ``--vec-isa-check``
(it skips Inductor's ~9.5 s per-process build check of the CPU's vector ISAs, which would otherwise be paid by
every variant alike).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def worker(args: argparse.Namespace) -> None:
    import torch

    from compiler.config import CompilationConfig
    from compiler.counters import counters
    from compiler.runner import ModelRunner

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
    )
    build = time.perf_counter() - t0
    startup = runner.warmup()
    wl = runner.run_workload()
    # Decode latency: 1-token steps of one sequence (best of --decode-steps).
    seq = runner.add_sequence([1, 2, 3])
    runner.step([seq])
    lat = []
    for i in range(args.decode_steps):
        seq.tokens.append(4 + i)
        lat.append(runner.step([seq]).seconds)
    stats = torch._dynamo.utils.counters["stats"]
    out = {
        "build_s": round(build, 3),
        "startup_s": round(startup, 3),
        "graphs_compiled": counters.graphs_compiled,
        "graphs_loaded": counters.graphs_loaded,
        "pieces": counters.pieces,
        "unique_pieces": counters.unique_pieces,
        "dynamo_graphs": int(stats.get("unique_graphs", 0)),
        # best of N: robust against other load on a small shared box
        "decode_ms": round(1000 * min(lat), 3) if lat else None,
        "checksum": wl.checksum,
        "logits_sample": wl.logits_sample[:4],
        "cache_key": getattr(getattr(runner.backend, "key", None), "hash", None),
    }
    print("BENCH_RESULT " + json.dumps(out), flush=True)


def run_variant(name: str, mode: int, root: Path, inductor_dir: Path, args: argparse.Namespace) -> dict:
    env = dict(os.environ)
    if not args.vec_isa_check:
        env["TORCHINDUCTOR_VEC_ISA_OK"] = "1"
    env["TORCHINDUCTOR_CACHE_DIR"] = str(inductor_dir)  # stock: an empty Inductor cache; mode 3 redirects its own
    env["TRITON_CACHE_DIR"] = str(inductor_dir / "triton")
    env.pop("CACHETOOL_DISABLE_COMPILE_CACHE", None)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
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
        "--decode-steps",
        str(args.decode_steps),
        "--compilation-config",
        args.compilation_config,
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(REPO))
    wall = time.perf_counter() - t0
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH_RESULT ")), None)
    if proc.returncode != 0 or line is None:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"{name}: worker failed (exit {proc.returncode})")
    result = json.loads(line[len("BENCH_RESULT ") :])
    result["process_s"] = round(wall, 3)
    result["variant"] = name
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny")
    p.add_argument("--device", default="cpu")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens of the dummy start-up batch")
    p.add_argument("--decode-steps", type=int, default=9)
    p.add_argument("--root", default=None, help="work folder (default: a temporary one, removed afterwards)")
    p.add_argument("--vec-isa-check", action="store_true", help="do not set TORCHINDUCTOR_VEC_ISA_OK=1")
    p.add_argument("--json", action="store_true", help="also print the results as JSON")
    p.add_argument(
        "--compilation-config",
        default="{}",
        help='extra CompilationConfig fields for every variant, e.g. \'{"cudagraph_mode": "NONE"}\' '
        "(a like-for-like compile comparison without CUDA graph capture)",
    )
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mode", type=int, default=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return 0

    with tempfile.TemporaryDirectory(prefix="bench_compile_", dir=args.root) as tmp:
        base = Path(tmp)
        rows = [
            run_variant("stock torch.compile, cold", 1, base / "stock_root", base / "stock_inductor", args),
            run_variant("pipeline cold", 3, base / "root", base / "cold_inductor", args),
            run_variant("pipeline hot (2nd process)", 3, base / "root", base / "hot_inductor", args),
        ]
    import torch

    print(
        f"model {args.model} on {args.device} · torch {torch.__version__} · {os.cpu_count()} CPUs · "
        f"start-up batch {args.max_tokens} tokens · TORCHINDUCTOR_VEC_ISA_OK={'unset' if args.vec_isa_check else '1'}"
    )
    header = (
        f"{'variant':<28} {'start-up s':>10} {'process s':>10} {'compiled':>9} {'loaded':>7} {'pieces':>7} "
        f"{'unique':>7} {'dynamo':>7} {'decode ms':>10}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        pieces = r["pieces"] if r["pieces"] else "-"
        unique = r["unique_pieces"] if r["pieces"] else "-"
        compiled = r["graphs_compiled"] if r["pieces"] else "(1 graph)"
        print(
            f"{r['variant']:<28} {r['startup_s']:>10.2f} {r['process_s']:>10.2f} {compiled!s:>9} "
            f"{r['graphs_loaded']:>7} {pieces!s:>7} {unique!s:>7} {r['dynamo_graphs']:>7} {r['decode_ms']!s:>10}"
        )
    same = rows[1]["checksum"] == rows[2]["checksum"]
    print(
        f"hot start compiled {rows[2]['graphs_compiled']} graphs; cold/hot outputs identical: {same}; "
        f"speed-up of start-up hot vs stock: {rows[0]['startup_s'] / max(rows[2]['startup_s'], 1e-9):.1f}x"
    )
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
