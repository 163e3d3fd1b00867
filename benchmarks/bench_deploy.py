"""Cold start vs hot start from a pulled bundle, each measured from process start to the first forward done.

    python benchmarks/bench_deploy.py --model tiny --device cpu
    python benchmarks/bench_deploy.py --model llama-3.2-1b --device cuda     # on the H200

One run, three processes:
1. cold: a fresh process on an empty cache root builds the model, compiles (Dynamo + Inductor, CUDA graphs where
   the mode captures them) and runs its first forward: what every server start costs without cachetool;
2. (not a start) the cold process's cache is packed, signed and pushed to a local folder store;
3. hot: a fresh process on another empty cache root pulls the bundle (signature, preflight, verified blobs,
   atomic install), builds the model, loads every piece (strict mode: a compile would fail the run) and runs its
   first forward: what an init-container plus server start cost with cachetool.

Each child process is timed from just before its spawn (time.time() in the parent) to its first forward done.
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


def child(args: argparse.Namespace) -> None:
    """One server start: (hot: pull first) → build → compile or load → first forward. Prints one JSON line."""
    spawned = float(args.spawned)
    t_import = time.time()
    import torch

    import cachetool
    from compiler.config import CompilationConfig
    from compiler.counters import counters, strict_mode
    from compiler.runner import ModelRunner

    phases = {"python+torch import": time.time() - spawned}
    root = Path(args.cache_root)
    pulled = None
    if args.child == "hot":
        t = time.time()
        r = cachetool.pull(args.ref, root, trust=[args.trust], device=args.device)
        pulled = {"blobs": r.blobs_downloaded, "bytes": r.bytes_downloaded}
        phases["pull+install"] = time.time() - t
    cfg = CompilationConfig()
    cfg.cache_dir = str(root)
    t = time.time()
    with strict_mode(args.child == "hot"):
        runner = ModelRunner(args.model, args.device, cfg)
        phases["build model"] = time.time() - t
        t = time.time()
        runner.warmup()  # compile or load on the dummy batch (and capture CUDA graphs), a forward included
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
    phases["compile/load + first forward"] = time.time() - t
    done = time.time()
    snap = counters.snapshot()
    print(
        json.dumps(
            {
                "start_to_first_forward": done - spawned,
                "phases": phases,
                "graphs_compiled": snap.graphs_compiled,
                "graphs_loaded": snap.graphs_loaded,
                "pulled": pulled,
                "import_started": t_import - spawned,
                "rank_dir": str(runner.backend.layout.rank_dir) if runner.backend else None,
            }
        )
    )


def spawn(mode: str, args: argparse.Namespace, root: Path, **extra: str) -> dict:
    argv = [
        sys.executable,
        __file__,
        "--child",
        mode,
        "--model",
        args.model,
        "--device",
        args.device,
        "--cache-root",
        str(root),
        "--spawned",
        repr(time.time()),
    ]
    for k, v in extra.items():
        argv += [f"--{k}", v]
    p = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "CACHETOOL_LOGGING_LEVEL": "WARNING"})
    if p.returncode != 0:
        sys.exit(f"{mode} start failed (exit {p.returncode}):\n{p.stderr[-4000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--workdir", default=None, help="keep the roots and the store here (default: a temp dir)")
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    ap.add_argument("--child", choices=["cold", "hot"], help=argparse.SUPPRESS)
    ap.add_argument("--cache-root", help=argparse.SUPPRESS)
    ap.add_argument("--spawned", help=argparse.SUPPRESS)
    ap.add_argument("--ref", help=argparse.SUPPRESS)
    ap.add_argument("--trust", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)

    import torch

    import cachetool
    from cachetool.bundle.signing import generate_keypair

    work = Path(args.workdir or tempfile.mkdtemp(prefix="ct-bench-deploy-"))
    work.mkdir(parents=True, exist_ok=True)
    key = work / "signing.key"
    if not key.exists():
        generate_keypair(key)
    cold = spawn("cold", args, work / "cold-root")
    ref = f"file://{work}/store/{args.model}:bench"
    t = time.time()
    pushed = cachetool.push(Path(cold["rank_dir"]).parent, ref, sign_key=str(key), progress=False)
    push_s = time.time() - t
    hot = spawn("hot", args, work / "hot-root", ref=ref, trust=str(key) + ".pub")

    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    print(f"\nmodel {args.model} on {args.device} ({device_name}), torch {torch.__version__}")
    print(f"bundle: {pushed.blobs_total} blobs, {pushed.bytes_uploaded / 2**20:.1f} MiB pushed in {push_s:.2f} s")
    rows = [("", "cold start (compile)", "hot start (pull + load)")]
    rows.append(
        (
            "process start → first forward, s",
            f"{cold['start_to_first_forward']:.2f}",
            f"{hot['start_to_first_forward']:.2f}",
        )
    )
    for phase in ("python+torch import", "pull+install", "build model", "compile/load + first forward"):
        rows.append(
            (
                f"  {phase}, s",
                f"{cold['phases'].get(phase, 0):.2f}" if phase in cold["phases"] else "-",
                f"{hot['phases'].get(phase, 0):.2f}" if phase in hot["phases"] else "-",
            )
        )
    rows.append(
        (
            "graphs compiled / loaded",
            f"{cold['graphs_compiled']} / {cold['graphs_loaded']}",
            f"{hot['graphs_compiled']} / {hot['graphs_loaded']}",
        )
    )
    w = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        print(f"{r[0]:<{w[0]}}  {r[1]:>{w[1]}}  {r[2]:>{w[2]}}")
    print(f"speed-up of the start: {cold['start_to_first_forward'] / hot['start_to_first_forward']:.1f}x")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"cold": cold, "hot": hot, "push_seconds": push_s, "device": device_name, "torch": torch.__version__},
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
