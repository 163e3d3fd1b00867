#!/usr/bin/env bash
# Real vLLM on a GPU machine (the H200 through the `device` tool, after ../shared/tools/vllm-h200's unpack.sh, with
# PYTHONPATH=/tmp/vsite), in two parts so that each fits one device call (the machine stays warm between them):
#   benchmarks/h200_vllm_run.sh start OUT   bench_vllm.py, fresh pod: cold warm, kept, pulled check, vllm serve on a
#                                           pulled root (issue 34 item 4: check wall vs the server's own start)
#   benchmarks/h200_vllm_run.sh verdicts OUT  bench_verdicts.py on that warm's root: the GPU rows pulled alone, a
#                                           few judged by vllm serve (the hashed change refused before download)
#   benchmarks/h200_vllm_run.sh matrix OUT  the version matrix's row of this vLLM (benchmarks/vllm_matrix.py --gpu:
#                                           README's "Supported vLLM versions", docs/vllm.md "Tested vLLM releases")
set -uo pipefail
part=${1:?start|verdicts|matrix}; out=${2:?OUT_DIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 CACHETOOL_LOGGING_LEVEL=WARNING HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_NO_USAGE_STATS=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
  NVSHMEM_DISABLE_NVLS=1 PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-/tmp/pyc}
work=/tmp/h200-vllm
case "$part" in
  start)
    rm -rf "$work"
    python3 -c "import torch, vllm; print('torch', torch.__version__, torch.cuda.get_device_name(), 'vllm', vllm.__version__)"
    python3 benchmarks/bench_vllm.py --model llama-3.2-1b --fresh-pod --no-eager --work "$work" \
      --json-out "$out/bench_vllm.json" 2>&1 | tee "$out/bench_vllm.log" ;;
  verdicts)
    python3 benchmarks/bench_verdicts.py --model "$work/models/llama-3.2-1b" --table gpu --warm-root "$work/ci-root" \
      --work "$work/verdicts" --judge-rows "--seed,--max-model-len,the model at another path,-O0" 2>&1 \
      | tee "$out/verdicts.log" ;;
  matrix)
    rm -rf ~/.triton /tmp/torchinductor_root ~/.cache/vllm  # a fresh pod
    python3 benchmarks/vllm_matrix.py --gpu --work "$work/matrix" --json "$out/matrix.json" \
      --release "$(python3 -c 'import vllm; print(vllm.__version__)')=$(command -v python3)" 2>&1 | tee "$out/matrix.log" ;;
esac
