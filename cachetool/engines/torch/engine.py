"""The torch engine (``--engine torch``): :class:`TorchEngine`, the :class:`~cachetool.engines.base.Engine` any
torch.compile program is: its declarations, its start (:mod:`~cachetool.engines.torch.start`), its answers to the
registry's questions. See :mod:`cachetool.engines.torch` and docs/torch.md."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cachetool.cache_root import CacheRoot
from cachetool.engines.base import EngineBase, own_options
from cachetool.engines.torch.variables import ROOT, VARIABLES
from cachetool.layouts.factors import Factors

__all__ = ["TorchEngine"]


OTHER_KEY_OPTIONS = (
    "--model, --compilation-config, -cc and --tensor-parallel-size are other engines' options: with "
    "--engine torch, pull takes the program's command after -- or nothing"
)
READ_ONLY_WHY = (
    "a torch.compile program writes under its Inductor cache at every start, a hit too (file locks and "
    "the kernels it loads: it dies with 'Read-only file system' there)"
)


class TorchEngine(EngineBase):
    name = "torch"
    summary = (
        "your own torch.compile program, the command after -- (e.g. -- python serve.py), run with "
        "Inductor's and Triton's caches in the root"
    )
    layout = "torch"
    key_kinds = ("program",)
    cache_root_variable = ROOT.name
    cache_root_default = "~/.cache/cachetool-torch"
    variables = VARIABLES
    fingerprint_fields = ("torch_engine", "cpu_isa")  # its facts' schema; Inductor's CPU code is the ISA's
    recorded_fields = ("gpu_driver",)
    platform_fields = ("cpu_isa",)

    @staticmethod
    def layout_rules():
        from cachetool.engines.torch import layout

        return layout

    # ------------------------------------------------------------------------------------------ starts
    def server_environment(self, root: Path) -> dict[str, str]:
        """The program reads Inductor's cache from ``TORCHINDUCTOR_CACHE_DIR`` and Triton's from
        ``TRITON_CACHE_DIR`` (the folders a warm and a check run it with: :func:`.run.program_env`); where the root
        ships coordinate-descent results for a torch that would tune again, ``PYTHONPATH`` names the folder that
        makes it use them (:mod:`.autotune_site`)."""
        from cachetool.engines.torch import autotune_site
        from cachetool.engines.torch.run import cache_variables

        return {**cache_variables(Path(root)), **autotune_site.variables(Path(root))}

    def start_request(self, command: str, model: str | None, cache_root: str | Path | None, options: Mapping[str, Any]):
        """The program's command after ``--`` parsed into a :class:`~.start.TorchStartRequest`; another engine's
        option (``--model`` first) refused in one line."""
        from cachetool.engines.torch.start import request_of

        return request_of(command, model, CacheRoot.of(cache_root, self), options)

    def start(self, request):
        """Run the program on the root; ``check`` with ``require_hit``: a start that compiled raises
        :class:`~cachetool.errors.EngineMissError` naming what and why, with the start as its ``start``."""
        from cachetool.engines.torch.start import start

        if request.command == "check":
            from cachetool.writable_root import require_writable

            # Inductor writes under its cache folder at every start, a hit too (file locks, a loaded kernel's
            # folders): on a read-only root the program itself dies with EROFS; and the start marks its root
            require_writable(request.cache_root, "check", needed_by=READ_ONLY_WHY)
        return start(request)

    # ------------------------------------------------------------------------------------------ facts
    def machine_facts(self, device: str | None) -> dict[str, str | None]:
        from cachetool.engines.torch.key import local_compiler_values

        values = local_compiler_values(device)
        return {name: values[name] for name in (*self.fingerprint_fields, *self.recorded_fields)}

    def recognizes(self, fingerprint: dict) -> bool:
        return bool((fingerprint or {}).get("torch_engine"))  # what its warms record: the schema of their facts

    def platform_prefix(self, fingerprint: dict) -> str | None:
        return "torch.compile"  # torch.compile-cpu-x86_64-avx512-torch2.13.0+cpu, beside a native bundle's

    # ------------------------------------------------------------------------------------------ keys
    def key_request(
        self, cache_root: CacheRoot, device: str, timeout: float | None, options: Mapping[str, Any]
    ) -> None:
        """No question beyond the install preflight's (:meth:`check_factors`): what the program compiles is its
        code's, which only a run can tell. The program's command after ``--`` is taken; other engines' options are
        not."""
        own_options(options, ("engine_flags",), lambda _name, _flag: OTHER_KEY_OPTIONS)
        return None

    def key_check(self, request: Any) -> None:
        return None  # key_request asks nothing

    def check_factors(self, manifest, device: str) -> list[str]:
        from cachetool.engines.torch.key import check_env

        return check_env(manifest)

    def key_lines(self, factors: Factors) -> list[str]:
        launch = factors.values("launch") or {}
        compiler = factors.values("compiler") or {}
        built = " ".join(
            f"{n} {compiler[n]}"
            for n in ("torch", "python", "device", "gpu", "capability", "cpu_isa")
            if compiler.get(n) is not None
        )
        return [f"runs      {' '.join(launch.get('command') or []) or '-'}", f"built by  {built}"]

    def local_factors(self, device: str) -> Factors | None:
        from cachetool.engines.torch.key import local_factors

        return local_factors(device)
