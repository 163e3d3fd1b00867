"""A torch.compile program's start-up with and without a cache, side by side, in one run: the torch engine
(``--engine torch``) against PyTorch's own Mega-Cache and a machine's kept local cache.

    python benchmarks/bench_torch_engine.py                                   # CPU: a 2-layer GPT, default mode
    python3 benchmarks/bench_torch_engine.py --device cuda --fresh-pod        # the H200: max-autotune, Triton
    python benchmarks/bench_torch_engine.py --json out.json                   # the figures as JSON too

The program (written into a work folder; it knows nothing of cachetool) builds a small GPT, compiles it with
``torch.compile`` (``--mode``; on CUDA by default ``max-autotune-no-cudagraphs``: Triton kernels and GEMM autotuning), runs a
prefill and a decode batch, and prints when its first forward was done. Each variant is one fresh process:

- ``cold``: ``cachetool warm --engine torch`` on an empty root (the CI job: it records the facts; the program also
  saves PyTorch's Mega-Cache artifacts, ``torch.compiler.save_cache_artifacts``, for the ``mega-cache`` row);
- ``pulled``: the warm's root packed into a bundle and installed (``cachetool.api.pack`` / ``install``) into a
  fresh root at another path, then ``cachetool check --engine torch`` there: a new pod with cachetool (the warm's
  root renamed aside meanwhile, as in the ``server`` row: a pod does not have it);
- ``mega-cache``: a fresh empty root, the program loading the Mega-Cache artifacts itself
  (``torch.compiler.load_cache_artifacts``) before it compiles: PyTorch's own answer (the warm's root aside too);
- ``kept``: ``check`` on the warm's own root again: the same machine, its local cache kept;
- ``server``: the program alone (no cachetool in its processes) on a pulled root, with the environment a pull prints
  for it (``server_environment``): what a server started as docs/torch.md says does; what it built is what the root
  gained (no probe: FX graphs and autotuning runs are not counted, ``-``).

``--fresh-pod`` removes the per-user caches a new pod lacks (``/tmp/torchinductor_$USER``, ``~/.triton``) before
``cold``, ``pulled`` and ``mega-cache``; ``--repeat N`` runs each ``check`` row N times (each ``pulled`` run on a
root as the install left it, each ``mega-cache`` run on an empty one) and shows the median; ``--alone N`` runs
the program alone N times, each on a fresh pull, and names what each built and which kernels coordinate descent
tuned (Inductor's own DEBUG line for it, ``TORCH_LOGS``): max-autotune's tuning at run time is noisy, one start
can build where the next does not. ``first forward`` is
the program's own clock (process start to the first forward done, synchronised); ``process`` is exec to exit. The
``check`` rows say what the program compiled (the probe's counters: FX graphs, C++ and Triton kernels, autotuning).
Runs without zstandard, cryptography or boto3 (the bundle is unsigned; where zstandard is missing the ``pulled`` row
is a copy of the root, and says so).
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import importlib.util
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

POD_CACHES = (f"/tmp/torchinductor_{getpass.getuser()}", "~/.triton")

PROGRAM = """
import time
T0 = time.perf_counter()
import argparse, json, os
p = argparse.ArgumentParser()
p.add_argument("--device", default="cpu")
p.add_argument("--layers", type=int, default=2)
p.add_argument("--dim", type=int, default=64)
p.add_argument("--seq", type=int, default=32)
p.add_argument("--save-mega")
p.add_argument("--load-mega")
p.add_argument("--mode", default=None)
a = p.parse_args()
import torch
t_import = time.perf_counter()
mega_load = 0.0
if a.load_mega:
    with open(a.load_mega, "rb") as f:
        torch.compiler.load_cache_artifacts(f.read())
    mega_load = time.perf_counter() - t_import


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.n1, self.n2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.o = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        self.heads = max(1, d // 64)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(y.transpose(1, 2).reshape(b, t, d))
        return x + self.down(torch.nn.functional.gelu(self.up(self.n2(x))))


class GPT(torch.nn.Module):
    def __init__(self, layers, d, vocab=4096):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.blocks = torch.nn.ModuleList(Block(d) for _ in range(layers))
        self.norm, self.head = torch.nn.LayerNorm(d), torch.nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


torch.manual_seed(0)
cuda = a.device.startswith("cuda")
model = GPT(a.layers, a.dim).to(a.device, torch.bfloat16 if cuda else torch.float32).eval()
compiled = torch.compile(model, mode=a.mode if a.mode != "default" else None)
with torch.no_grad():
    prefill = compiled(torch.randint(0, 4096, (4, a.seq), device=a.device))
    if cuda:
        torch.cuda.synchronize()
    first = time.perf_counter()
    decode = compiled(torch.randint(0, 4096, (4, 1), device=a.device))
    if cuda:
        torch.cuda.synchronize()
    ready = time.perf_counter()
saved = 0
if a.save_mega:
    artifacts = torch.compiler.save_cache_artifacts()
    if artifacts is not None:
        with open(a.save_mega, "wb") as f:
            f.write(artifacts[0])
        saved = len(artifacts[0])
print("BENCH " + json.dumps({"import_s": round(t_import - T0, 3), "mega_load_s": round(mega_load, 3),
                             "first_forward_s": round(first - T0, 3), "ready_s": round(ready - T0, 3),
                             "mega_bytes": saved, "checksum": round(float(prefill.float().sum()), 2)}))
"""


def clear_pod_caches() -> None:
    for c in POD_CACHES:
        shutil.rmtree(Path(c).expanduser(), ignore_errors=True)


def cachetool(*args) -> tuple[dict, float]:
    """One ``cachetool ... --json`` process: its JSON object (also on failure) and its wall time."""
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "cachetool", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - t0
    lines = p.stdout.strip().splitlines()
    if p.returncode not in (0, 4) or not lines:
        sys.stderr.write(p.stderr[-4000:])
        raise SystemExit(f"cachetool {args[0]} failed with exit {p.returncode}")
    return json.loads(lines[-1]), wall


def program_figures(start: dict) -> dict:
    """The program's own ``BENCH`` line, from its log."""
    for line in Path(start["log"]).read_text().splitlines():
        if line.startswith("BENCH "):
            return json.loads(line[6:])
    raise SystemExit(f"the program printed no BENCH line (log: {start['log']})")


def start(verb: str, root: Path, command: list[str]) -> dict:
    out, wall = cachetool(verb, "--engine", "torch", "--cache-root", root, "--json", "--", *command)
    s = out.get("compile", out)  # warm --json nests the start
    return {**s, "wall": wall, "program": program_figures(s)}


def median_start(times: int, before, root: Path, command: list[str]) -> dict:
    """``check`` ``times`` times (``before()`` ahead of each: a fresh root or pod), the run of median ready time."""
    runs = []
    for _ in range(times):
        before()
        runs.append(start("check", root, command))
    runs.sort(key=lambda r: r["program"]["ready_s"])
    return {**runs[len(runs) // 2], "ready_runs": [r["program"]["ready_s"] for r in runs]}


# Inductor's coordinate-descent tuner logs each kernel it tunes at DEBUG ("= Do coordinate descent tuning for NAME
# ="); on a start that tunes nothing it prints nothing, so the program alone runs with it on: which kernels tuned
COORDESC_LOG = "+torch._inductor.runtime.coordinate_descent_tuner,+torch._inductor.runtime.autotune_cache"
COORDESC_TUNED = re.compile(r"= Do coordinate descent tuning for (\S+) =")
# what the tuner decided and where a result was saved: the evidence of a start that tuned, kept in the JSON
TUNING_LINES = re.compile(r"coordinate descent tuning for|Improve from|tuning result to")


def triton_kernel_names(folders: set[str]) -> list[str]:
    """The kernel names of Triton cache folders (``{hash}/{name}.cubin``), sorted."""
    return sorted(
        {p.stem for folder in folders for p in Path(folder).iterdir() if p.suffix in (".cubin", ".hsaco", ".so")}
    )


def program_alone(root: Path, command: list[str]) -> dict:
    """The program with the environment a pull prints for ``root`` and nothing of cachetool in it; what it built is
    what the root gained, named (the Triton kernels built, the kernels coordinate descent tuned)."""
    from cachetool.engines.torch.engine import TorchEngine
    from cachetool.engines.torch.layout import kernel_files

    environment = TorchEngine().server_environment(root)
    env = dict(os.environ, TORCH_LOGS=COORDESC_LOG)
    for name, value in environment.items():
        env[name] = os.pathsep.join(p for p in (value, env.get(name)) if p) if name == "PYTHONPATH" else value
    before = kernel_files(root)
    t0 = time.perf_counter()
    p = subprocess.run(command, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    seconds = time.perf_counter() - t0
    bench = [ln[6:] for ln in p.stdout.splitlines() if ln.startswith("BENCH ")]
    if p.returncode != 0 or not bench:
        sys.stderr.write(p.stdout[-2000:] + p.stderr[-4000:])
        raise SystemExit(f"the program alone failed with exit {p.returncode}")
    after = kernel_files(root)
    built = {kind: len(after[kind] - before[kind]) for kind in after}
    return {
        "seconds": round(seconds, 3),
        "program": json.loads(bench[-1]),
        "environment": environment,
        "fx_graph_hits": "-",
        "graphs_compiled": "-",
        "cpp_kernels_built": built["cpp"],
        "triton_kernels_built": built["triton"],
        "triton_kernels_built_names": triton_kernel_names(after["triton"] - before["triton"]),
        "coordesc_tuned": sorted(set(COORDESC_TUNED.findall(p.stderr))),
        "tuning_log": [ln[-300:] for ln in p.stderr.splitlines() if TUNING_LINES.search(ln)][:80],
        "autotune_benchmarks": None,
        "autotune_results_written": built["autotune"],
    }


def pull_like_a_pod(root: Path, dest: Path) -> dict:
    """The warm's root packed (unsigned) and installed at another path; a copy where zstandard is missing."""
    from cachetool import api

    if importlib.util.find_spec("zstandard") is None:  # what pack and install compress with
        from cachetool.layouts import triton_groups

        t0 = time.perf_counter()
        shutil.copytree(root, dest)
        triton_groups.rewrite_groups(dest.rglob(f"{triton_groups.GROUP_PREFIX}*.json"), print)  # as install does
        return {"how": "copied (zstandard missing: carry its wheel)", "seconds": time.perf_counter() - t0}
    ctb = dest.parent / "bench.ctb"
    t0 = time.perf_counter()
    packed = api.pack(root, ctb)
    t1 = time.perf_counter()
    api.install(ctb, dest, insecure_skip_verify=True, warn=lambda _m: None)
    t2 = time.perf_counter()
    return {
        "how": "pack + install",
        "pack_s": round(t1 - t0, 3),
        "install_s": round(t2 - t1, 3),
        "seconds": round(t2 - t0, 3),
        "files": packed.files,
        "bytes": {"raw": packed.bytes.raw, "compressed": packed.bytes.compressed},
    }


@contextlib.contextmanager
def warm_root_away(root: Path):
    """``root`` renamed aside while the block runs: a pod that pulled has no warm's root at its path, and a pulled
    root whose files name that path (Triton's group files, the autotuners Inductor loads) must not be read from it
    here either. Yields a list that ends holding the files a process of the block wrote at the warm's path (torch's
    loaded autotuners save what they tune there, making its folders): they are removed before the root returns."""
    away = root.with_name(root.name + ".away")
    written: list[str] = []
    root.rename(away)
    try:
        yield written
    finally:
        with contextlib.suppress(OSError):  # never hide the block's own error
            if root.exists():
                written += sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
                print(f"   {len(written)} file(s) written at the warm's path while it was away: {written[:3]}")
                shutil.rmtree(root)
            away.rename(root)


def run(args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="bench-torch-engine-"))
    prog = work / "program.py"
    prog.write_text(PROGRAM)
    command = [
        sys.executable,
        str(prog),
        "--device",
        args.device,
        "--layers",
        str(args.layers),
        "--dim",
        str(args.dim),
        "--seq",
        str(args.seq),
        "--mode",
        args.mode,
    ]
    mega = work / "mega.bin"
    rows: dict[str, dict] = {}
    if args.fresh_pod:
        clear_pod_caches()
    print(f"== cold: warm --engine torch on an empty root ({work})", flush=True)
    rows["cold"] = start("warm", work / "warm-root", [*command, "--save-mega", str(mega)])
    print("== pulled: packed, installed at another path, check", flush=True)
    pulled = pull_like_a_pod(work / "warm-root", work / "pulled-root")
    pod = clear_pod_caches if args.fresh_pod else (lambda: None)

    def fresh_pull() -> None:  # each repeat on a root as a pull leaves it
        pod()
        shutil.rmtree(work / "pulled-root")
        shutil.copytree(work / "pulled-template", work / "pulled-root")

    shutil.copytree(work / "pulled-root", work / "pulled-template")
    with warm_root_away(work / "warm-root") as written:
        rows["pulled"] = median_start(args.repeat, fresh_pull, work / "pulled-root", command)
    rows["pulled"]["written_at_warm_path"] = written
    print("== mega-cache: an empty root, torch.compiler.load_cache_artifacts, check", flush=True)

    def fresh_empty() -> None:
        pod()
        shutil.rmtree(work / "mega-root", ignore_errors=True)

    # away here too: a Mega-Cache start is a fresh pod, and torch 2.11's loaded autotuners save the results they tune
    # at the path they were compiled at, which would rewrite the warm root's results the kept row reads
    with warm_root_away(work / "warm-root") as written:
        rows["mega-cache"] = median_start(
            args.repeat, fresh_empty, work / "mega-root", [*command, "--load-mega", str(mega)]
        )
    rows["mega-cache"]["written_at_warm_path"] = written
    print("== kept: check on the warm's own root", flush=True)
    rows["kept"] = median_start(args.repeat, lambda: None, work / "warm-root", command)
    print("== server: the program alone on a pulled root, with the environment pull prints", flush=True)
    alone = []
    with warm_root_away(work / "warm-root") as written:
        for _ in range(args.alone):  # each a fresh pod on a root as the pull left it
            fresh_pull()
            alone.append(program_alone(work / "pulled-root", command))
    rows["server"] = {
        **alone[0],
        "written_at_warm_path": written,
        "ready_runs": [a["program"]["ready_s"] for a in alone],
        "runs": [
            {k: a[k] for k in ("triton_kernels_built", "triton_kernels_built_names", "coordesc_tuned", "tuning_log")}
            for a in alone
        ],
    }
    shutil.rmtree(work, ignore_errors=True)
    return {"rows": rows, "pull": pulled, "device": args.device, "layers": args.layers, "dim": args.dim}


def _autotuning(row: dict) -> str:
    """Autotuning runs and results written; a row without the probe counts only the results."""
    if row["autotune_benchmarks"] is None:
        return f"- / {row['autotune_results_written']} written"
    return str(row["autotune_benchmarks"] + row["autotune_results_written"])


def table(result: dict) -> str:
    rows = result["rows"]
    cold, kept = rows["cold"]["program"]["ready_s"], rows["kept"]["program"]["ready_s"]
    out = [
        "| variant | first forward | ready (prefill + decode; runs) | process | FX graphs loaded / compiled | "
        "C++ / Triton kernels built | autotuning | vs kept | vs cold |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        p = r["program"]
        runs = r.get("ready_runs", [])
        spread = f" ({', '.join(f'{x:.1f}' for x in runs)})" if len(runs) > 1 else ""
        out.append(
            f"| {name} | {p['first_forward_s']:.2f} s | {p['ready_s']:.2f} s{spread} | {r['seconds']:.2f} s | "
            f"{r['fx_graph_hits']} / {r['graphs_compiled']} | {r['cpp_kernels_built']} / "
            f"{r['triton_kernels_built']} | {_autotuning(r)} | "
            f"{p['ready_s'] / kept:.2f}x | {p['ready_s'] / cold:.2f}x |"
        )
    out.append("")
    for i, r in enumerate(rows["server"].get("runs", []), 1):
        out.append(
            f"server run {i}: {r['triton_kernels_built']} Triton kernel(s) built"
            + (f" {r['triton_kernels_built_names']}" if r["triton_kernels_built_names"] else "")
            + f", coordinate descent tuned {r['coordesc_tuned'] or 'nothing'}"
        )
    pull = result["pull"]
    out.append(
        f"pull ({pull['how']}): {pull['seconds']:.2f} s"
        + (
            f" (pack {pull['pack_s']:.2f} s, install {pull['install_s']:.2f} s; {pull['files']} files, "
            f"{pull['bytes']['compressed']} bytes compressed)"
            if "pack_s" in pull
            else ""
        )
    )
    out.append(
        f"Mega-Cache artifacts: {rows['cold']['program']['mega_bytes']} bytes, loaded in "
        f"{rows['mega-cache']['program']['mega_load_s']:.2f} s; every row's checksum equal: "
        f"{len({r['program']['checksum'] for r in rows.values()}) == 1}"
    )
    out.append(
        "files written at the warm's path while it was away (torch's loaded autotuners save there): "
        + ", ".join(
            f"{name} {len(rows[name].get('written_at_warm_path', []))}" for name in ("pulled", "mega-cache", "server")
        )
    )
    return "\n".join(out)


def runs(text: str) -> int:
    """A number of runs for argparse: 1 or more (0 would leave a row with no run)."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of runs (1 or more)")
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu or cuda (cuda: max-autotune, Triton kernels)")
    ap.add_argument("--layers", type=int, default=None, help="default: 2 on the CPU, 4 on CUDA")
    ap.add_argument("--dim", type=int, default=None, help="default: 64 on the CPU, 512 on CUDA")
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--fresh-pod", action="store_true", help="remove the per-user caches a new pod lacks first")
    ap.add_argument("--repeat", type=runs, default=1, help="runs of each check row; the median is shown")
    ap.add_argument(
        "--alone",
        type=runs,
        default=1,
        help="runs of the program alone (the server row), each on a fresh pull; what each built and tuned is listed",
    )
    ap.add_argument(
        "--mode",
        default=None,
        help="torch.compile's mode (default: max-autotune-no-cudagraphs on CUDA, "
        "Inductor's default on the CPU; 'default' for Inductor's default anywhere)",
    )
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args()
    cuda = args.device.startswith("cuda")
    args.layers = args.layers or (4 if cuda else 2)
    args.dim = args.dim or (512 if cuda else 64)
    args.mode = args.mode or ("max-autotune-no-cudagraphs" if cuda else "default")
    result = run(args)
    print(table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
