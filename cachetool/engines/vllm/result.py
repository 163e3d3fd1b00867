"""What one headless vLLM start did (``warm``, ``check --engine vllm``): :class:`VllmStartResult`, for a terminal
(:meth:`~VllmStartResult.lines`) and as one JSON object (:meth:`~VllmStartResult.to_json`), and the
``--require-hit`` rule on it (:func:`require_hit`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from cachetool.engines.vllm import releases
from cachetool.engines.vllm.root_files import AOT_DIR
from cachetool.errors import EngineMissError


@dataclasses.dataclass
class VllmStartResult:
    """One real vLLM start on a cache root (``warm`` or ``check --engine vllm``)."""

    command: str
    model: str
    cache_root: str
    flags: list[str]
    vllm_version: str | None
    cache_key: str | None  # the AOT folder vLLM used (sha256), rank 0's
    cache_keys: list[str]  # every key folder the workers used
    key_existed: bool  # that folder was in the root before the start
    inductor_compiled: int  # kernel binaries written by this start (Inductor compiled them)
    inductor_loaded: int  # kernel binaries the workers mapped that were there before
    dynamo_traces: int  # graphs Dynamo traced (0 when vLLM loaded its AOT artifact)
    aot_loaded: bool  # vLLM loaded its AOT artifact (no trace)
    aot_saved: bool
    aot_error: str | None  # vLLM's own reason for not loading it
    aot_artifacts_loaded: int  # vLLM's counter num_aot_artifacts_loaded, summed over the workers
    compiled_artifacts_loaded: int  # vLLM's counter num_compiled_artifacts_loaded (GPU: loaded graphs)
    inductor_graphs_compiled: int  # graphs Inductor lowered (its counters: worker_facts.graphs_compiled)
    inductor_graphs_loaded: int  # graphs Inductor took from its cache
    startup_seconds: float  # engine init, as vLLM's `LLMEngine` takes it
    seconds: float  # the whole child process, exec to exit
    phases: dict[str, float]  # import, key, engine_init, workload
    tensor_parallel_size: int
    ranks: list[dict[str, Any]]
    log: str  # vLLM's log of this start
    aot_paths: list[str] = dataclasses.field(default_factory=list)  # the AOT files loaded or saved
    environment_notes: list[str] = dataclasses.field(default_factory=list)  # what a server started here would miss
    compiled: list[str] = dataclasses.field(default_factory=list)  # what it compiled or wrote (worker_facts' rule)
    vllm_counters: dict[str, int] = dataclasses.field(default_factory=dict)  # vLLM's own, summed: shown, not judged
    written_outside: dict[str, int] = dataclasses.field(default_factory=dict)  # files added outside the root, by folder
    engine: str = "vllm"

    @property
    def hit(self) -> bool:  # the server's folder was there, and nothing was compiled or written
        return self.key_existed and not self.compiled

    @property
    def graphs_compiled(self) -> int:  # the name the native engine's results use (warm summaries, CI scripts)
        return self.inductor_compiled

    @property
    def graphs_loaded(self) -> int:  # CPU: kernel libraries mapped; GPU (cubins are not mapped): vLLM's counter
        return self.inductor_loaded or self.compiled_artifacts_loaded

    @property
    def cache_dir(self) -> str | None:
        return str(Path(self.cache_root, *AOT_DIR, self.cache_key)) if self.cache_key else None

    def miss_reason(self) -> str | None:
        if self.hit:
            return None
        if not self.key_existed:
            return (
                f"vLLM used key folder {short_key(self.cache_key)}, which {self.cache_root} did not hold "
                "(another model path, flag, environment or install than the cache was warmed with)"
            )
        aot = (
            ""
            if self.aot_loaded
            else (f"; vLLM did not load its AOT artifact ({self.aot_note()}): {self.aot_error or 'none saved'}")
        )
        return f"{', '.join(self.compiled)} in key folder {short_key(self.cache_key)}{aot}"

    def aot_note(self) -> str:
        return releases.aot_note(self.vllm_version, releases.device_here())

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(
            hit=self.hit,
            miss_reason=self.miss_reason(),
            graphs_compiled=self.graphs_compiled,
            aot_expected=releases.aot_loads(self.vllm_version, releases.device_here()),
            graphs_loaded=self.graphs_loaded,
            cache_dir=self.cache_dir,
        )
        return d

    def pack_folder(self) -> Path:
        """What a warm's push packs: the whole cache root, which holds everything the server reads on a hit (the
        AOT key folder, the piecewise folder(s) its backend loads, ``modelinfos/``, ``triton_cache/``)."""
        return Path(self.cache_root)

    def lines(self) -> list[str]:
        """The start as a few lines for a terminal (the JSON object is :meth:`to_json`'s)."""
        aot = "loaded" if self.aot_loaded else f"not loaded ({self.aot_error or 'none saved yet'}; {self.aot_note()})"
        if self.command == "warm":
            verdict = (
                f"warmed: Inductor compiled {self.inductor_compiled} kernel(s)"
                if self.inductor_compiled
                else "already warm: Inductor compiled nothing"
            )
        else:
            verdict = "HIT: nothing compiled or written" if self.hit else f"MISS: {self.miss_reason()}"
        return [
            f"{self.command}: model {self.model} with vLLM {self.vllm_version} "
            f"(tensor parallel {self.tensor_parallel_size})",
            f"  cache root     {self.cache_root}",
            f"  cache key      {self.cache_key or '-'}" + ("" if self.key_existed else " (new)"),
            f"  inductor       compiled {self.inductor_graphs_compiled} graph(s), loaded "
            f"{self.inductor_graphs_loaded}; kernels written {self.inductor_compiled}, loaded "
            f"{self.inductor_loaded}; Dynamo traces {self.dynamo_traces}",
            f"  AOT artifact   {aot}",
            f"  start-up       {self.startup_seconds:.2f} s engine init (process {self.seconds:.2f} s); "
            + ", ".join(f"{k} {v:.2f} s" for k, v in self.phases.items()),
            f"  vLLM log       {self.log}",
            *(f"  server env     {note}" for note in self.environment_notes),
            *(
                f"  outside root   {n} file(s) written in {folder}: they do not ship (every fresh pod builds them)"
                for folder, n in self.written_outside.items()
            ),
            f"  result         {verdict}",
        ]


def short_key(h: str | None) -> str:
    return (h[:16] + "...") if h else "(none)"


def require_hit(out: VllmStartResult) -> None:
    if not out.hit:
        raise EngineMissError(f"check: not a hit: {out.miss_reason()}", start=out)
