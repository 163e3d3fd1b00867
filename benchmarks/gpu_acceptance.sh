#!/usr/bin/env bash
# The GPU acceptance command (benchmarks/gpu_acceptance.py), as the device tool's calls run it on the H200: vLLM's
# CUDA build comes from ../shared/tools/vllm-h200 (`PROFILE=fp8-moe build.sh .vllm-h200-fp8`: three chunks, one a
# call, back to back; the machine stays warm between calls), unpacked into /tmp/vsite by the third call.
#   call 1  carry .vllm-h200-fp8/{unpack.sh,SHA256SUMS,c01}   bash benchmarks/gpu_acceptance.sh chunk
#   call 2  carry .vllm-h200-fp8/{unpack.sh,SHA256SUMS,c02}   bash benchmarks/gpu_acceptance.sh chunk
#   call 3  carry .vllm-h200-fp8/{unpack.sh,SHA256SUMS,c03}   ... vllm --skip ro-server                  (508 s)
#   call 4  carry .vllm-h200-fp8/unpack.sh    ... vllm --only read-only (its server); ... moe-cold
#   call 5  carry .vllm-h200-fp8/unpack.sh    ... moe-pulled                                             (276 s)
#   then   the same carry                     ... dense-cold, dense-pulled, moe-moved, native, torch
# (the H100's times on 2026-12-06: moe-cold about 360 s, dense-cold about 410 s, 250 s for `torch --modes
# max-autotune-no-cudagraphs`. With less device time, `moe --no-stock` or `dense --no-stock` (481 s without its check,
# which now runs on the 70 s or more left of the part's 560 s) runs a model's FP8 rows in one call, the warm
# standing for the cold start.)
# Each part writes its rows and progress under $OUT (what a timed-out call returns) and ends with the table of
# every row so far; docs/gpu.md keeps the latest, with its date and commit.
set -uo pipefail
part=${1:?chunk|native|torch|vllm|moe|dense|moe-cold|moe-pulled|moe-moved|dense-cold|dense-pulled}; shift
out=${OUT:-/tmp/gpu-acceptance-out}
mkdir -p "$out" /tmp/gpu-acceptance
if [ "$part" = chunk ]; then
  bash .vllm-h200-fp8/unpack.sh; rc=$?
  [ "$rc" = 2 ] && { echo "chunk kept (exit 2: waiting for the rest)"; exit 0; }
  exit "$rc"
fi
case "$part" in
  native|torch) ;;  # no vLLM (the vLLM tree, when unpacked, still lends them zstandard for the torch part's pack)
  *) bash .vllm-h200-fp8/unpack.sh || { echo "unpack failed: start again from c01"; exit 1; } ;;
esac
export PYTHONPATH=/tmp/vsite${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 CACHETOOL_LOGGING_LEVEL=WARNING \
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_NO_USAGE_STATS=1 NCCL_NVLS_ENABLE=0 \
  TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-/tmp/pyc}
# results that outlive a call's $OUT (emptied before each call): kept in /tmp, copied back at the end
keep=/tmp/gpu-acceptance-keep
mkdir -p "$keep"
cp -a "$keep/." "$out/" 2>/dev/null
# A call that ran past its limit leaves its server running: the servers start in sessions of their own, which the
# device tool's kill of the call does not reach, and the next server then lacks the GPU memory it asks for ("Free
# memory on device ... is less than desired GPU memory utilization"). The machine is this command's alone: stop
# whatever an earlier call left on the GPU.
left=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | tr -d ' ' | tr '\n' ' ')
if [ -n "${left// /}" ]; then
  echo "$(date -u +%T) stopping what an earlier call left on the GPU: pid(s) $left" | tee -a "$out/progress.log"
  kill -9 $left 2>/dev/null; sleep 3
fi
echo "$(date -u +%FT%TZ) part $part, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), \
$(python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name())' 2>&1 | tail -1)" >> "$out/progress.log"
# the newest server log, copied into $OUT as it grows: a call that times out still shows how far a start got
( while sleep 10; do latest=$(ls -t "${XDG_STATE_HOME:-$HOME/.local/state}"/cachetool/logs/vllm-*.log 2>/dev/null | head -n 1)
    [ -n "$latest" ] && cp "$latest" "$out/vllm-latest.log"; done ) &
copier=$!
python3 benchmarks/gpu_acceptance.py "$part" --out "$out" "$@"; rc=$?
kill "$copier" 2>/dev/null
python3 benchmarks/gpu_acceptance.py table --out "$out"
cp -a "$out/." "$keep/"
exit "$rc"
