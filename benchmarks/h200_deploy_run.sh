#!/usr/bin/env bash
# The deploy-path figures on a GPU machine, in one run (the H200 through the `device` tool; see docs/gpu.md):
#   1. bench_deploy: cold start vs hot start from a pulled bundle (process start → first forward done);
#   2. bench_compile with cudagraph_mode NONE: stock torch.compile vs this pipeline, compile only;
#   3. the CLI path itself: warm --push file:// → pull --model (key preflight) → check --require-hit.
# Usage: benchmarks/h200_deploy_run.sh OUT_DIR [MODEL]
set -uo pipefail
out=${1:?OUT_DIR}; model=${2:-llama-3.2-1b}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 CACHETOOL_LOGGING_LEVEL=WARNING
ct() { python3 -m cachetool "$@"; }
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
echo "== 1. bench_deploy"
python3 benchmarks/bench_deploy.py --model "$model" --device cuda --json "$out/deploy.json" || echo "bench_deploy FAILED"
echo "== 2. bench_compile (cudagraph_mode NONE)"
python3 benchmarks/bench_compile.py --model "$model" --device cuda --compilation-config '{"cudagraph_mode": "NONE"}' \
  || echo "bench_compile FAILED"
echo "== 3. CLI: warm --push → pull --model → check --require-hit"
w=$(mktemp -d)
ct keygen -o "$w/k" >/dev/null
TIMEFORMAT="warm wall %R s"; time python3 -m cachetool warm --model "$model" --device cuda --cache-root "$w/ci" \
  --push "file://$w/store/m:gpu" --sign-key "$w/k" --json > "$out/warm.json"; echo "warm exit $?"
TIMEFORMAT="pull wall %R s"; time python3 -m cachetool pull "file://$w/store/m:gpu" --cache-root "$w/srv" \
  --trust "$w/k.pub" --device cuda --model "$model" --json > "$out/pull.json"; echo "pull exit $?"
TIMEFORMAT="check wall %R s"; time python3 -m cachetool check --model "$model" --device cuda --cache-root "$w/srv" \
  --require-hit --json > "$out/check.json"; echo "check exit $?"
python3 - "$out" <<'PY'
import json, sys
o = sys.argv[1]
w, p, c = (json.load(open(f"{o}/{n}.json")) for n in ("warm", "pull", "check"))
print("warm: compiled", w["graphs_compiled"], "bytes", w["bytes"], "phases", w["phases"])
print("pull: blobs", p["blobs_downloaded"], "bytes", p["bytes_downloaded"], "s", round(p["seconds"], 2),
      "preflight", p["install"]["preflight"])
print("check: compiled", c["graphs_compiled"], "loaded", c["graphs_loaded"], "startup_s", c["startup_seconds"],
      "same outputs as warm:", c["workload"]["checksum"] == w["compile"]["workload"]["checksum"])
PY
