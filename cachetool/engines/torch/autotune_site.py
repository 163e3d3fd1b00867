"""The folder that lets a torch 2.11/2.12 program use the coordinate-descent results its root ships.

A ``max-autotune`` program's root holds, beside each tuned Triton kernel, the configuration coordinate descent chose
(``inductor/**.best_config``, ``"found_by_coordesc": true``). torch 2.11 (and 2.12, not checked) does not use it
when the compiled graph comes from the FX-graph cache: every start tunes again and builds Triton kernels (PyTorch
issue #172819; :mod:`compiler.torch_compat.autotune_reuse` says how, and gives those releases torch 2.13's rule). So
where a root holds such results and its facts name such a torch, a warm and an install write::

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

__all__ = ["SITE", "has_coordesc_results", "reuse_module", "settle", "source_file", "variables"]

SITE = ".cachetool-site"
MODULE = "sitecustomize.py"


def source_file() -> Path:
    """compiler/torch_compat/autotune_reuse.py of this install: the ``compiler`` package is installed beside
    ``cachetool`` (one project), and is found by path, not by import (importing it imports torch; a ``compiler``
    folder in the working directory would shadow it)."""
    return Path(__file__).resolve().parents[3] / "compiler" / "torch_compat" / "autotune_reuse.py"


@functools.lru_cache(maxsize=1)
def reuse_module() -> ModuleType:
    """The module itself, loaded from its file (it imports the standard library only until torch is running)."""
    spec = importlib.util.spec_from_file_location("cachetool_autotune_reuse", source_file())
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


def _remove(site: Path) -> None:
    """Whatever lies at the folder's name: a folder, a file, a link (never followed)."""
    if site.is_symlink() or (site.exists() and not site.is_dir()):
        site.unlink()
    elif site.is_dir():
        shutil.rmtree(site)


def settle(root: Path) -> Path | None:
    """Write ``{root}/.cachetool-site`` where the root needs it (coordinate-descent results, and a recorded torch
    that does not use them), else remove what lies at that name; the folder, or None. ``CACHETOOL_AUTOTUNE_REUSE``
    (``1``/``0``) in cachetool's own environment decides for any torch, as it does in the program."""
    site = Path(root) / SITE
    _remove(site)  # written from this install's file only, never kept from a bundle or a link
    if not any(reuse_module().needed(v) for v in _recorded_torch(root)) or not has_coordesc_results(root):
        return None
    site.mkdir()
    shutil.copyfile(source_file(), site / MODULE)
    return site


def variables(root: Path) -> dict[str, str]:
    """``PYTHONPATH`` naming the folder, where the root has it (a server sets it before its own entries)."""
    site = Path(root) / SITE
    real = site.is_dir() and not site.is_symlink() and (site / MODULE).is_file() and not (site / MODULE).is_symlink()
    return {"PYTHONPATH": str(site)} if real else {}
