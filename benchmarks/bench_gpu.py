"""GPU benchmark of issue 3: CUDA-graph modes vs eager, decode latency, capture time, compile_sizes start-up.

    python3 benchmarks/bench_gpu.py --model llama-3.2-1b [--out DIR] [--quick]

Sections (each prints a table and writes JSON into --out):
1. correctness: a fixed prefill/decode script (mixed prefill, uniform decodes of 3/2/1 sequences, a mixed
   prefill+decode batch; padding everywhere) run eagerly (mode 0, no graphs) and with the piecewise backend under
   each cudagraph_mode; max |logit difference| vs eager and vs the compiled run without graphs, greedy-token
   agreement. Also run in float32 on the tiny model, where the tolerance can be tight.
2. latency: decode step latency (``ModelRunner.step``: inputs, forward, lm head, logits to host) at 1, 8 and 64
   sequences (= tokens), per mode; capture time and number of graphs per mode.
3. start-up with compile_sizes [1, 2, 4, 8] (max-autotune on CUDA), default cudagraph_mode, cold (empty cache
   root, empty Inductor/Triton caches) vs hot (a second process on the same root, empty global caches), each in
   its own process: compiles, loads, autotune runs (:class:`compiler.autotune.AutotuneCounter`), seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from compiler.config import CompilationConfig, CUDAGraphMode  # noqa: E402

DEVICE = "cuda"  # --device cpu: a smoke run of this script's logic (graphs emulated, nothing captured)
MODES = [
    CUDAGraphMode.NONE,
    CUDAGraphMode.PIECEWISE,
    CUDAGraphMode.FULL,
    CUDAGraphMode.FULL_DECODE_ONLY,
    CUDAGraphMode.FULL_AND_PIECEWISE,
]


def log(*a: object) -> None:
    print(*a, flush=True)


def script(runner) -> list[torch.Tensor]:  # noqa: ANN001
    """Teacher-forced prefill and decode steps; returns the logits of every step."""
    g = torch.Generator().manual_seed(123)
    vocab = runner.model_cfg.vocab_size

    def toks(n: int) -> list[int]:
        return torch.randint(1, vocab, (n,), generator=g).tolist()

    a, b, c = runner.add_sequence(toks(37)), runner.add_sequence(toks(5)), runner.add_sequence(toks(12))
    outs = [runner.step([a, b, c]).logits]  # prefill 54 tokens
    for group in ([a, b, c], [a, b, c], [a, b], [c]):
        for s in group:
            s.tokens += toks(1)
        outs.append(runner.step(group).logits)  # uniform decode 3, 3, 2, 1
    d = runner.add_sequence(toks(7))
    for s in (a, b):
        s.tokens += toks(1)
    outs.append(runner.step([a, b, d]).logits)  # mixed: 2 decodes + 7-token prefill = 9
    for s in (a, b, c, d):
        runner.free(s)
    return outs


def compare(outs: list[torch.Tensor], ref: list[torch.Tensor]) -> dict:
    diff = max(float((x - y).abs().max()) for x, y in zip(outs, ref))
    scale = max(float(y.abs().max()) for y in ref)
    agree = sum(int((x.argmax(-1) == y.argmax(-1)).sum()) for x, y in zip(outs, ref))
    total = sum(int(y.shape[0]) for y in ref)
    return {"max_abs_diff": diff, "rel": diff / scale, "argmax_agree": f"{agree}/{total}"}


def use_mode(runner, mode: CUDAGraphMode, debug: bool = False, emulate: bool = False) -> dict:  # noqa: ANN001
    """Switch ``runner`` to ``mode`` (a fresh graph pool) and capture its graphs (``emulate``: same dispatch,
    padding and attention path, nothing captured)."""
    from compiler.cudagraph_runner import GraphExecutor

    runner.graphs = None
    if DEVICE == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    runner.graphs = GraphExecutor(runner, mode=mode, debug_addresses=debug, emulate=emulate or DEVICE != "cuda")
    secs = runner.graphs.capture()
    return {"capture_s": round(secs, 2), "graphs": runner.graphs.num_graphs}


def build(model: str, cfg: dict, dtype: torch.dtype | None, **kw: int):  # noqa: ANN003, ANN201
    from compiler.runner import ModelRunner

    c = CompilationConfig.from_dict({"cudagraph_mode": "NONE", **cfg})
    r = ModelRunner(model, DEVICE, c, dtype=dtype, **kw)
    t = time.perf_counter()
    r.warmup()
    return r, time.perf_counter() - t


def correctness(model: str, dtype: torch.dtype | None, kw: dict) -> dict:
    log(f"== correctness: {model} {dtype or 'bf16'}")
    eager, _ = build(model, {"mode": 0}, dtype, **kw)
    ref = script(eager)
    del eager
    runner, secs = build(model, {"mode": 3}, dtype, **kw)
    log(f"compiled in {secs:.1f} s")
    rows = {}
    nograph = None
    for mode in MODES:
        info = use_mode(runner, mode, debug=True)
        outs = script(runner)
        if mode == CUDAGraphMode.NONE:
            nograph = outs
        same_path = outs
        if mode != CUDAGraphMode.NONE:  # the same dispatch/padding/attention path, run without graphs
            use_mode(runner, mode, emulate=True)
            same_path = script(runner)
        row = {
            **compare(outs, ref),
            "vs_compiled_no_graphs": compare(outs, nograph)["max_abs_diff"],
            "vs_same_path_no_capture": compare(outs, same_path)["max_abs_diff"],
            **info,
        }
        rows[mode.value] = row
        log(f"{mode.value:20s} {row}")
    return rows


def decode_latency(runner, batch: int, steps: int = 30, context: int = 32) -> float:  # noqa: ANN001
    g = torch.Generator().manual_seed(7)
    vocab = runner.model_cfg.vocab_size
    seqs = [runner.add_sequence(torch.randint(1, vocab, (context,), generator=g).tolist()) for _ in range(batch)]
    chunk = max(1, runner.max_num_batched_tokens // context)
    for i in range(0, batch, chunk):
        runner.step(seqs[i : i + chunk])
    times = []
    for i in range(steps + 5):
        for s in seqs:
            s.tokens.append(1 + i)
        t = time.perf_counter()
        runner.step(seqs)
        times.append(time.perf_counter() - t)
    for s in seqs:
        runner.free(s)
    return statistics.median(times[5:]) * 1e3


def prefill_latency(runner, tokens: int, reps: int = 10) -> float:  # noqa: ANN001
    times = []
    for i in range(reps + 3):
        s = runner.add_sequence([(7 * j + i) % (runner.model_cfg.vocab_size - 1) + 1 for j in range(tokens)])
        t = time.perf_counter()
        runner.step([s])
        times.append(time.perf_counter() - t)
        runner.free(s)
    return statistics.median(times[3:]) * 1e3


def latency(model: str, kw: dict) -> dict:
    log(f"== latency: {model}, {kw}")
    eager, _ = build(model, {"mode": 0}, None, **kw)
    rows = {"eager (mode 0)": {f"decode_{b}": round(decode_latency(eager, b), 3) for b in (1, 8, 64)}}
    rows["eager (mode 0)"]["prefill_128"] = round(prefill_latency(eager, 128), 3)
    log(rows)
    del eager
    runner, _ = build(model, {"mode": 3}, None, **kw)
    for mode in MODES:
        info = use_mode(runner, mode)
        row = {f"decode_{b}": round(decode_latency(runner, b), 3) for b in (1, 8, 64)}
        row["prefill_128"] = round(prefill_latency(runner, 128), 3)
        row.update(info)
        rows[mode.value] = row
        log(f"{mode.value:20s} {row}")
    return rows


def startup_child(model: str, root: str, sizes: list[int], kw: dict) -> dict:
    """One server-like start in this process: build, compile or load, capture; counters."""
    from compiler.autotune import AutotuneCounter
    from compiler.counters import counters
    from compiler.runner import ModelRunner

    cfg = CompilationConfig.from_dict({"compile_sizes": sizes, "cache_dir": root})
    before = counters.snapshot()
    t0 = time.perf_counter()
    runner = ModelRunner(model, DEVICE, cfg, **kw)
    t_build = time.perf_counter() - t0
    with AutotuneCounter() as at:
        t1 = time.perf_counter()
        runner.warmup()
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        t_warm = time.perf_counter() - t1
    d = counters.delta(before)
    return {
        "mode": runner.graphs.mode.value,
        "build_s": round(t_build, 2),
        "startup_s": round(t_warm, 2),
        "capture_s": round(runner.graphs.capture_seconds, 2),
        "graphs": runner.graphs.num_graphs,
        "compiled": d.graphs_compiled,
        "loaded": d.graphs_loaded,
        "reused": d.graphs_reused,
        "autotune": at.as_dict(),
    }


def startup(model: str, kw: dict, out: Path) -> dict:
    log(f"== start-up with compile_sizes [1, 2, 4, 8]: {model}")
    root = tempfile.mkdtemp(prefix="cg_root_")
    rows = {}
    for phase in ("cold", "hot"):
        env = dict(os.environ)
        env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"ind_{phase}_")  # empty global caches
        env["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"tri_{phase}_")
        t = time.perf_counter()
        proc = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                "--device",
                DEVICE,
                "--model",
                model,
                "--root",
                root,
                "--kw",
                json.dumps(kw),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=480,
        )
        wall = time.perf_counter() - t
        (out / f"startup_{phase}.log").write_text(proc.stderr[-200000:])
        if proc.returncode != 0:
            log(proc.stderr[-4000:])
            rows[phase] = {"error": proc.returncode}
            continue
        rows[phase] = json.loads(proc.stdout.strip().splitlines()[-1]) | {"process_wall_s": round(wall, 2)}
        log(f"{phase}: {rows[phase]}")
    return rows


def fmt_tables(res: dict) -> str:
    try:
        import triton

        tv = triton.__version__
    except ImportError:
        tv = "-"
    dev = torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu"
    lines = [f"torch {torch.__version__}, triton {tv}, {dev}"]
    for key, rows in res.get("correctness", {}).items():
        lines += [
            "",
            f"correctness ({key}): logits of 6 prefill/decode steps vs eager (mode 0, no graphs)",
            "| cudagraph_mode | max abs diff vs eager | relative | vs compiled, no graphs | "
            "vs same path, not captured | greedy tokens equal | graphs |",
            "|---|---|---|---|---|---|---|",
        ]
        for m, r in rows.items():
            lines.append(
                f"| {m} | {r['max_abs_diff']:.3g} | {r['rel']:.2g} | {r['vs_compiled_no_graphs']:.3g} | "
                f"{r['vs_same_path_no_capture']:.3g} | {r['argmax_agree']} | {r['graphs']} |"
            )
    if "latency" in res:
        lines += [
            "",
            "decode step latency (ms, median of 30; ModelRunner.step incl. lm head and logits to host)",
            "| mode | 1 token | 8 tokens | 64 tokens | prefill 128 | graphs | capture s |",
            "|---|---|---|---|---|---|---|",
        ]
        for m, r in res["latency"].items():
            lines.append(
                f"| {m} | {r['decode_1']} | {r['decode_8']} | {r['decode_64']} | {r['prefill_128']} | "
                f"{r.get('graphs', '-')} | {r.get('capture_s', '-')} |"
            )
    if "startup" in res:
        lines += [
            "",
            "start-up, compile_sizes [1, 2, 4, 8] (max-autotune), default cudagraph_mode, one process each",
            "| start | mode | warm-up s (compile/load + capture) | capture s | graphs | pieces compiled | "
            "loaded | autotune runs (gemm / triton configs / coordesc) | process wall s |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for ph, r in res["startup"].items():
            if "error" in r:
                lines.append(f"| {ph} | error {r['error']} |")
                continue
            a = r["autotune"]
            lines.append(
                f"| {ph} | {r['mode']} | {r['startup_s']} | {r['capture_s']} | {r['graphs']} | {r['compiled']} | "
                f"{r['loaded']} | {a['total']} ({a['gemm_autotune']} / {a['triton_benchmark_all']} / "
                f"{a['coordesc']}) | {r['process_wall_s']} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama-3.2-1b")
    ap.add_argument("--device", default="cuda", help="cuda; cpu only smoke-tests this script (graphs emulated)")
    ap.add_argument("--out", default=os.environ.get("OUT", "bench_gpu_out"))
    ap.add_argument("--sections", default="correctness,latency,startup")
    ap.add_argument("--max-num-batched-tokens", type=int, default=256)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--kw", default="{}", help=argparse.SUPPRESS)
    args = ap.parse_args()
    global DEVICE
    DEVICE = args.device
    if args.child:
        print(json.dumps(startup_child(args.model, args.root, [1, 2, 4, 8], json.loads(args.kw))), flush=True)
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("CACHETOOL_CACHE_ROOT", tempfile.mkdtemp(prefix="cg_cache_"))
    kw = {"max_num_seqs": 64, "max_model_len": 256, "max_num_batched_tokens": args.max_num_batched_tokens}
    res: dict = {"torch": torch.__version__, "model": args.model, "runner": kw}
    sections = args.sections.split(",")
    t0 = time.perf_counter()

    def save() -> None:
        (out / "bench_gpu.json").write_text(json.dumps(res, indent=2))
        (out / "bench_gpu.md").write_text(fmt_tables(res) + "\n")

    def section(name: str, fn) -> None:  # noqa: ANN001
        t = time.perf_counter()
        try:
            fn()
        except Exception:  # keep going: the other sections' figures still come back
            import traceback

            traceback.print_exc()
            res.setdefault("errors", []).append(name)
        log(f"-- section {name}: {time.perf_counter() - t:.1f} s")
        save()

    small = {"max_num_seqs": 8, "max_model_len": 128, "max_num_batched_tokens": 64}
    res["correctness"] = {}
    if "correctness" in sections:
        section(
            "correctness tiny",
            lambda: res["correctness"].__setitem__("tiny, float32", correctness("tiny", torch.float32, small)),
        )
        section(
            "correctness model",
            lambda: res["correctness"].__setitem__(
                f"{args.model}, {'bfloat16' if DEVICE == 'cuda' else 'float32'}", correctness(args.model, None, small)
            ),
        )
        if DEVICE == "cuda":
            section(
                "correctness model fp32",
                lambda: res["correctness"].__setitem__(
                    f"{args.model}, float32", correctness(args.model, torch.float32, small)
                ),
            )
    if "latency" in sections:
        section("latency", lambda: res.__setitem__("latency", latency(args.model, kw)))
    if "startup" in sections:
        section(
            "startup",
            lambda: res.__setitem__(
                "startup",
                startup(args.model, {"max_num_seqs": 8, "max_model_len": 256, "max_num_batched_tokens": 64}, out),
            ),
        )
    log(f"\ntotal {time.perf_counter() - t0:.1f} s\n")
    log(fmt_tables(res))


if __name__ == "__main__":
    main()
