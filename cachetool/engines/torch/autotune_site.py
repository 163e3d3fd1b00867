"""The folder that lets a torch 2.11/2.12 program use the coordinate-descent results its root ships.

A ``max-autotune`` program's root holds, beside each tuned Triton kernel, the configuration coordinate descent chose
(``inductor/**.best_config``, ``"found_by_coordesc": true``). torch up to 2.12 does not use it when the compiled
graph comes from the FX-graph cache: every start tunes again and builds Triton kernels (PyTorch issue #172819;
:mod:`compiler.torch_compat.autotune_reuse` says how, and gives those releases torch 2.13's rule). So where a root
holds such results and its facts name such a torch, a warm and an install write::

    {root}/.cachetool-site/sitecustomize.py     compiler/torch_compat/autotune_reuse.py, copied from this install

and the program runs with that folder on ``PYTHONPATH``: a warm and a check put it after their probe, and the server
environment a pull prints names it (:func:`variables`). The folder is never packed (a layout scan takes
``inductor/``, ``triton/`` and ``facts/`` only) and is written again from cachetool's own file at every install,
whatever a bundle held there: no bundle decides what code the program runs.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import shutil
from pathlib import Path
from types import ModuleType

from cachetool.engines.root_names import FACTORS_FILE
from cachetool.engines.torch.layout import FACTS, INDUCTOR

__all__ = ["SITE", "has_coordesc_results", "settle", "variables"]

SITE = ".cachetool-site"
MODULE = "sitecustomize.py"


@functools.lru_cache(maxsize=1)
def _source() -> Path:
    """compiler/torch_compat/autotune_reuse.py of this install, found without importing ``compiler`` (which
    imports torch)."""
    spec = importlib.util.find_spec("compiler")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("the compiler package is not installed beside cachetool")
    return Path(spec.origin).parent / "torch_compat" / "autotune_reuse.py"


@functools.lru_cache(maxsize=1)
def _reuse() -> ModuleType:
    """The module itself, loaded from its file (it imports the standard library only until torch is running)."""
    spec = importlib.util.spec_from_file_location("cachetool_autotune_reuse", _source())
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def has_coordesc_results(root: Path) -> bool:
    """Whether ``root`` holds a configuration chosen by coordinate descent (``inductor/**.best_config``)."""
    inductor = Path(root) / INDUCTOR
    if not inductor.is_dir():
        return False
    for path in inductor.rglob("*.best_config"):
        try:
            if json.loads(path.read_text()).get("found_by_coordesc") is True:
                return True
        except (OSError, ValueError, AttributeError):
            continue
    return False


def _recorded_torch(root: Path) -> list[str]:
    versions = []
    for path in sorted((Path(root) / FACTS).glob(f"*/{FACTORS_FILE}")):
        try:
            compiler = json.loads(path.read_text())["factors"]["compiler"]["values"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(compiler, dict) and isinstance(compiler.get("torch"), str):
            versions.append(compiler["torch"])
    return versions


def settle(root: Path) -> Path | None:
    """Write ``{root}/.cachetool-site`` where the root needs it (coordinate-descent results, and a recorded torch
    that does not use them), else remove one left there; the folder, or None."""
    site = Path(root) / SITE
    shutil.rmtree(site, ignore_errors=True)  # written from this install's file only, never kept from a bundle
    if not any(_reuse().needed(v) for v in _recorded_torch(root)) or not has_coordesc_results(root):
        return None
    site.mkdir()
    shutil.copyfile(_source(), site / MODULE)
    return site


def variables(root: Path) -> dict[str, str]:
    """``PYTHONPATH`` naming the folder, where the root has it (a server sets it before its own entries)."""
    site = Path(root) / SITE
    return {"PYTHONPATH": str(site)} if (site / MODULE).is_file() else {}
