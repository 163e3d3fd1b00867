"""Any torch.compile program as an engine (``--engine torch``): warm and check run the user's own command with
Inductor's and Triton's cache folders in the root and a probe the program need not know about
(:mod:`~cachetool.engines.torch.start`, :mod:`~cachetool.engines.torch.run`, :mod:`~cachetool.engines.torch.probe`);
what it compiled and loaded is the probe's report (:mod:`~cachetool.engines.torch.result`); the facts its caches
depend on are recorded, checked and compared in :mod:`~cachetool.engines.torch.key`; its root as a bundle layout is
:mod:`~cachetool.engines.torch.layout`; the arguments after ``--`` are read in
:mod:`~cachetool.engines.torch.command`. See docs/torch.md."""

from __future__ import annotations

from pathlib import Path

from cachetool.layouts.factors import Difference, Factors
from cachetool.engines.base import KeyCheckRequest, StartConfig, StartRequest
from cachetool.engines.torch.variables import ROOT, VARIABLES
from cachetool.errors import UsageError

__all__ = ["TorchEngine"]


READ_ONLY_WHY = ("a torch.compile program writes under its Inductor cache at every start, a hit too (file locks and "
                 "the kernels it loads: it dies with 'Read-only file system' there)")


class TorchEngine:
    name = "torch"
    summary = ("your own torch.compile program, the command after -- (e.g. -- python serve.py), run with "
               "Inductor's and Triton's caches in the root")
    layout = "torch"
    key_kinds = ("program",)
    cache_root_variable = ROOT.name
    cache_root_default = "~/.cache/cachetool-torch"
    variables = VARIABLES
    fingerprint_fields = ("torch_engine", "cpu_isa")  # its facts' schema; Inductor's CPU code is the ISA's
    recorded_fields = ("gpu_driver",)
    platform_fields = ("cpu_isa",)
    local_by_server = False

    @staticmethod
    def layout_rules():
        from cachetool.engines.torch import layout

        return layout

    # ------------------------------------------------------------------------------------------ starts
    def server_environment(self, root: Path) -> dict[str, str]:
        """The program reads Inductor's cache from ``TORCHINDUCTOR_CACHE_DIR`` and Triton's from
        ``TRITON_CACHE_DIR`` (the folders a warm and a check run it with: :func:`.run.program_env`)."""
        from cachetool.engines.torch.run import cache_variables

        return cache_variables(Path(root))

    def start_config(self, config, overrides: tuple[str, ...]) -> StartConfig:
        return StartConfig(config)  # the program's own configuration is its code

    def warm(self, request: StartRequest):
        from cachetool.engines.torch.start import start

        return start("warm", request, request.messages)

    def check(self, request: StartRequest):
        """Run the program again on the root; ``require_hit``: a start that compiled raises
        :class:`~cachetool.errors.EngineMissError` naming what and why, with the start as its ``start``."""
        from cachetool.engines.torch.start import start

        from cachetool.writable_root import require_writable

        # Inductor writes under its cache folder at every start, a hit too (file locks, a loaded kernel's folders):
        # on a read-only root the program itself dies with EROFS; and the start marks its root
        require_writable(request.cache_root, "check", needed_by=READ_ONLY_WHY)
        return start("check", request, request.messages)

    # ------------------------------------------------------------------------------------------ facts
    def machine_facts(self, device: str | None) -> dict[str, str | None]:
        from cachetool.engines.torch.key import local_compiler_values

        values = local_compiler_values(device)
        return {name: values[name] for name in (*self.fingerprint_fields, *self.recorded_fields)}

    def notice(self) -> str | None:
        return None  # the program is the user's own: no release of ours to warn of

    def recognizes(self, fingerprint: dict) -> bool:
        return bool((fingerprint or {}).get("torch_engine"))  # what its warms record: the schema of their facts

    def platform_prefix(self, fingerprint: dict) -> str | None:
        return "torch.compile"  # torch.compile-cpu-x86_64-avx512-torch2.13.0+cpu, beside a native bundle's

    # ------------------------------------------------------------------------------------------ keys
    def key_check(self, request: KeyCheckRequest):
        """Nothing beyond the install preflight's (:meth:`check_factors`): what the program compiles is its code's,
        which only a run can tell. The program's command after ``--`` is taken; other engines' options are not."""
        if (request.model is not None or request.config is not None or request.overrides
                or request.tensor_parallel_size != 1):
            raise UsageError("--model, --compilation-config, -cc and --tensor-parallel-size are other engines' "
                             "options: with --engine torch, pull takes the program's command after -- or nothing")
        return None

    def check_factors(self, manifest, device: str) -> list[str]:
        from cachetool.engines.torch.key import check_env

        return check_env(manifest)

    def compare_keys(self, a: Factors | None, b: Factors | None, *, only: tuple[str, ...] | None = None,
                     cache: str = "") -> list[Difference]:
        from cachetool.facts.factor_compare import compare_keys

        return compare_keys(a, b, only=only, cache=cache)

    def key_lines(self, factors: Factors) -> list[str]:
        launch = factors.values("launch") or {}
        compiler = factors.values("compiler") or {}
        built = " ".join(f"{n} {compiler[n]}" for n in ("torch", "python", "device", "gpu", "capability", "cpu_isa")
                         if compiler.get(n) is not None)
        return [f"runs      {' '.join(launch.get('command') or []) or '-'}", f"built by  {built}"]

    def local_factors(self, device: str) -> Factors | None:
        from cachetool.engines.torch.key import local_factors

        return local_factors(device)

    def server_differences(self, keys: list[tuple[str, Factors | None]], model: str, flags: list[str],
                           scratch: Path) -> list[Difference]:
        raise UsageError("--model and flags after -- on diff are for an engine whose server computes its key; "
                         "--engine torch compares this machine's facts (diff BUNDLE local --engine torch)")
