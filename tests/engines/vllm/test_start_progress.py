"""A long vLLM start shows its phase as it goes (cachetool/engines/vllm/child/progress.py), and the logs of the runs
cachetool starts are kept where a user finds them, the newest of each kind (cachetool/run_logs.py)."""

from __future__ import annotations

import threading
import time

from cachetool import run_logs
from cachetool.engines.vllm.child.progress import current_phase, heartbeat

# vLLM 0.26's lines of an FP8 MoE start on the H200, in order (shortened)
LINES = [
    "(EngineCore pid=1) INFO [gpu_model_runner.py] Starting to load model /m...",
    "(EngineCore pid=1) INFO [gpu_model_runner.py] Model loading took 3.2 GiB memory and 1.9 seconds",
    "(EngineCore pid=1) INFO [backends.py] Dynamo bytecode transform time: 4.1 s",
    "(EngineCore pid=1) INFO [backends.py] Compiling a graph for compile range (1, 2048) takes 9.0 s",
    "(EngineCore pid=1) INFO [flashinfer.jit] Building JIT module fp8_gemm_sm90 with ninja",
    "(EngineCore pid=1) INFO [deep_gemm.py] DeepGemm(fp8_gemm_nt) warmup (W=...) 12/64",
    "(EngineCore pid=1) INFO [autotuner.py] [Autotuner]: Autotuning process starts ...",
    "(EngineCore pid=1) INFO [gpu_worker.py] Memory profiling takes 3.4 seconds",
    "(EngineCore pid=1) INFO [gpu_model_runner.py] Graph capturing finished in 2 secs",
]


def test_the_phase_is_the_last_line_that_names_one():
    assert current_phase("") == "importing vLLM"
    seen = [current_phase("\n".join(LINES[: i + 1])) for i in range(len(LINES))]
    assert seen == [
        "loading the model",
        "model loaded; torch.compile (Dynamo) next",
        "torch.compile: Inductor",
        "torch.compile: Inductor compiling graphs",
        "FlashInfer JIT (nvcc builds)",
        "DeepGEMM JIT warm-up",
        "kernel autotuning",
        "profiling memory, allocating the KV cache",
        "capturing CUDA graphs",
    ]


def test_a_heartbeat_names_each_phase_while_the_start_runs(tmp_path):
    """The warm's lines while vLLM writes its log: one every period, each with the seconds and the phase."""
    log = tmp_path / "vllm.log"
    log.write_text("")
    said: list[str] = []
    lock = threading.Lock()

    def say(line: str) -> None:
        with lock:
            said.append(line)

    with heartbeat(log, say, "warm", every=0.05):
        for line in LINES[4:7]:
            with open(log, "a") as f:
                f.write(line + "\n")
            time.sleep(0.3)
    time.sleep(0.1)
    count = len(said)
    assert count >= 3 and all(s.startswith("warm: vLLM starting, ") for s in said), said
    assert {"FlashInfer JIT (nvcc builds)", "DeepGEMM JIT warm-up", "kernel autotuning"} <= {
        s.split(": ", 2)[-1] for s in said
    }, said
    time.sleep(0.2)
    assert len(said) == count  # stopped with the start


def test_run_logs_live_in_the_state_folder_and_the_newest_of_each_kind_stay(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    made = [run_logs.new_log("vllm-warm") for _ in range(run_logs.KEEP + 5)]
    other = run_logs.new_log("torch-check")
    folder = tmp_path / "cachetool" / "logs"
    assert all(p.parent == folder for p in made) and other.parent == folder
    left = sorted(folder.glob("vllm-warm-*.log"))
    assert len(left) == run_logs.KEEP and set(left) <= set(made) and other.exists()


def test_a_run_log_falls_back_to_the_temporary_folder_where_the_state_folder_cannot_be_made(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker))  # a file where the folder must be
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    log = run_logs.new_log("vllm-check")
    assert log.parent == tmp_path and log.name.startswith("cachetool-vllm-check-")
