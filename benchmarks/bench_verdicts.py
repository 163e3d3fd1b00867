"""The pull's verdict for server commands unlike the warm's, each pulled alone, with its wall time, how it was
decided, and (``--judge``) what the real ``vllm serve`` then did on that root, side by side, in one run.

    python benchmarks/bench_verdicts.py                      # the tiny Llama on the CPU, every row of the table
    python benchmarks/bench_verdicts.py --judge              # ... and each row judged by its own vllm serve
    python benchmarks/bench_verdicts.py --model llama-3.2-1b --table gpu --judge-rows=-O0,--seed   # the H200

One warm (``cachetool warm --engine vllm --push file://...``) makes the bundle; each row of
:mod:`tests.vllm_oracle.verdict_table` is then pulled with the server's own command line after ``--`` into a
fresh root (``pull wall``: the whole ``cachetool pull`` process, exec to exit). The judge starts the server as a
deployment would: a hit on the pulled root (it must compile nothing and answer), a miss on the bundle's root
installed regardless (it must compile: stopped at its first key folder or kernel), an eager one on what its pull left
(it must compile nothing). Targets (printed, not asserted): every pull <= 2 s; every verdict the server's.
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

HEADLESS = ["--load-format", "dummy", "--skip-tokenizer-init"]
API = ["--host", "127.0.0.1", "--port", "8001"]


def cachetool(*args, env: dict | None = None) -> tuple[subprocess.CompletedProcess, float]:
    import os

    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "cachetool", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    return p, time.perf_counter() - t0


def json_of(p: subprocess.CompletedProcess) -> dict:
    return json.loads(p.stdout[p.stdout.index("{") :]) if "{" in p.stdout else {}


def warm(model: Path, flags: list[str], work: Path, warm_root: Path | None) -> str:
    """The bundle every row is pulled from: a warm of its own, or ``warm_root`` (another run's warmed root,
    e.g. bench_vllm.py's ``ci-root``) pushed as it is."""
    ref = f"file://{work}/store/verdicts:v1"
    cachetool("keygen", "-o", work / "k")
    if warm_root is None:
        warm_root = work / "warm-root"
        p, wall = cachetool(
            "warm", "--engine", "vllm", "--model", model, "--cache-root", warm_root, "--json", "--", *flags
        )
        if p.returncode:
            raise SystemExit(f"warm failed (exit {p.returncode}): {p.stderr[-2000:]}")
        print(
            f"warm: {wall:.1f} s wall (vLLM's facts recorded in "
            f"{json_of(p).get('compile', json_of(p)).get('phases', {}).get('facts', '?')} s)",
            flush=True,
        )
    p, _ = cachetool("pack", warm_root, "-o", work / "bundle.ctb", "--sign-key", work / "k")
    if p.returncode:
        raise SystemExit(f"pack failed (exit {p.returncode}): {p.stderr[-2000:]}")
    p, _ = cachetool("push", work / "bundle.ctb", ref)
    if p.returncode:
        raise SystemExit(f"push failed (exit {p.returncode}): {p.stderr[-2000:]}")
    return ref


def pull_row(ref: str, work: Path, root: Path, model: Path, flags: list[str], row) -> dict:
    p, wall = cachetool(
        "pull",
        ref,
        "--cache-root",
        root,
        "--trust",
        f"{work}/k.pub",
        "--engine",
        "vllm",
        "--json",
        "--",
        str(model),
        *flags,
        *row.flags,
        *HEADLESS,
        *API,
        env=row.env,
    )
    doc = json_of(p)
    verdict = {"installed": "hit", "miss": "miss", "not-needed": "eager"}.get(doc.get("outcome"), "error")
    if doc.get("compiles_nothing"):
        verdict = "eager"
    if verdict == "miss":
        how = doc["message"].rsplit("; ", 1)[-1].rstrip(")")
    elif verdict == "hit":
        how = next((x for x in doc["install"]["preflight"] if x.startswith("cache key")), "").split("(", 1)[-1]
    else:
        how = doc.get("compiles_nothing") or doc.get("reason") or doc.get("message", "")
    return {"verdict": verdict, "wall": wall, "how": how.rstrip(")"), "exit": p.returncode}


def judge_row(verdict: str, ref_root: Path, work: Path, model: Path, flags: list[str], row) -> str:
    from tests.vllm_oracle.server import serve_once

    if verdict == "miss":
        cachetool(
            "install", work / "bundle.ctb", "--cache-root", ref_root, "--trust", f"{work}/k.pub", "--no-preflight"
        )
    api_key = "k" if "--api-key" in row.flags else None
    run = serve_once(
        str(model),
        ref_root,
        [*flags, *[f for f in row.flags if f not in ("--api-key", "k")], *HEADLESS],
        env=row.env,
        api_key=api_key,
        stop_when_compiling=verdict == "miss",
    )
    did = (
        f"compiled ({len(run.new_key_folders)} new key folder(s), {', '.join(run.evidence) or 'nothing else'}; "
        f"log {run.log})"
        if run.compiled
        else "compiled nothing" + ("" if run.completion else ", NO ANSWER")
    )
    # an eager server is judged as tests/engines/vllm/real/test_real_server.py judges it: up, and nothing compiled
    # (vLLM 0.32's eager CPU path dies at its first request on an AVX-512 box: its own fault, shown as NO ANSWER, not
    # a disagreement)
    answered = bool(run.completion) or (verdict == "eager" and run.ready_seconds > 0)
    agree = run.compiled == (verdict == "miss") and (run.compiled or answered)
    return f"{did} ({run.ready_seconds:.0f} s){'' if agree else '  <-- DISAGREES'}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="llama-3.2-1b, a model folder, or the tiny Llama (default)")
    ap.add_argument("--table", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--judge", action="store_true", help="judge every row by its own vllm serve")
    ap.add_argument(
        "--judge-rows",
        default="",
        help="comma-separated rows to judge (instead of all); give it as --judge-rows=-O0,... (a value that starts with a dash)",
    )
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument(
        "--warm-root",
        type=Path,
        default=None,
        help="a root already warmed for --model and its flags (no warm of its own)",
    )
    args = ap.parse_args()
    from cachetool.engines.vllm.install_facts import vllm_version
    from tests.vllm_oracle.tiny import CPU_FLAGS, GPU_FLAGS, write_llama_1b, write_model
    from tests.vllm_oracle.verdict_table import GPU_TABLE, TABLE, model_for

    work = args.work or Path(tempfile.mkdtemp(prefix="bench-verdicts-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.model == "llama-3.2-1b":
        model, flags = write_llama_1b(work / "models" / "llama-3.2-1b"), GPU_FLAGS
    elif args.model and args.model.endswith("llama-3.2-1b") and Path(args.model).is_dir():  # bench_vllm.py's
        model, flags = Path(args.model), GPU_FLAGS
    elif args.model:
        model, flags = Path(args.model), CPU_FLAGS
    else:
        model, flags = write_model(work / "models" / "tiny-llama"), CPU_FLAGS
    table = GPU_TABLE if args.table == "gpu" else TABLE
    judged = set(table) if args.judge else {r for r in args.judge_rows.split(",") if r}
    print(f"vLLM {vllm_version()}, model {model}, flags {' '.join(flags)}, {len(table)} rows", flush=True)
    ref = warm(model, flags, work, args.warm_root)
    print(f"\n{'server command (vs the warm)':<40} {'verdict':<11} {'pull wall':>9}  {'how':<60} server")
    walls, asked = [], []
    for i, (name, row) in enumerate(table.items()):
        with model_for(row, model, work / f"m{i}") as m:
            got = pull_row(ref, work, work / f"root{i}", m, flags, row)
            server = judge_row(got["verdict"], work / f"root{i}", work, m, flags, row) if name in judged else "-"
        (asked if row.asks_vllm else walls).append(got["wall"])
        print(f"{name:<40} {got['verdict']:<11} {got['wall']:>8.2f}s  {got['how'][:60]:<60} {server}", flush=True)
    print(
        f"\npull wall, {len(walls)} rows decided without vLLM: max {max(walls):.2f} s, median "
        f"{sorted(walls)[len(walls) // 2]:.2f} s (target <= 2 s: {'met' if max(walls) <= 2 else 'MISSED'}); "
        f"{len(asked)} row(s) only vLLM can judge (vLLM asked by design): " + ", ".join(f"{w:.1f} s" for w in asked)
    )


if __name__ == "__main__":
    main()
