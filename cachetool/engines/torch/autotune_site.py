"""The folder that lets a torch 2.11 to 2.13 program use the coordinate-descent results its root ships.

A ``max-autotune`` program's root holds, beside each tuned Triton kernel, the configuration coordinate descent chose
(``inductor/**.best_config``, ``"found_by_coordesc": true``). torch 2.11 (and 2.12, not checked) does not use it
when the compiled graph comes from the FX-graph cache: every start tunes again and builds Triton kernels (PyTorch
issue #172819); torch 2.11 to 2.13 look it up at the warm's path, which a pulled root is not at.
:mod:`~cachetool.engines.torch.autotune_reuse` says how, and gives those releases torch 2.13's rule, looking beside
the kernel here. So where a root holds such results and its facts name such a torch, the layout's settle (after an
install, and before a warm's or a check's program runs) writes::

    {root}/.cachetool-site/sitecustomize.py     autotune_reuse.py, copied from this install of cachetool

and the program runs with that folder on ``PYTHONPATH``: a warm and a check put it after their probe, and the server
environment a pull prints names it (:func:`variables`). The folder is cachetool's: a layout scan never packs it, an
install skips a bundle's unit there, and every settle writes it again from cachetool's own file (or removes whatever
lies at its name, a link never followed). Like the Inductor code a bundle ships, what runs is only as trusted as the
root: a root someone else can write is a root that runs their code.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from cachetool.engines.torch import autotune_reuse
from cachetool.engines.torch.root_names import INDUCTOR, SITE

__all__ = ["MODULE", "has_coordesc_results", "settle", "source_file", "variables"]

MODULE = "sitecustomize.py"


def source_file() -> Path:
    """What the folder holds: :mod:`~cachetool.engines.torch.autotune_reuse`'s file of this install."""
    return Path(autotune_reuse.__file__)


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


def _remove(site: Path) -> None:
    """Whatever lies at the folder's name: a folder, a file, a link (never followed)."""
    if site.is_symlink() or (site.exists() and not site.is_dir()):
        site.unlink()
    elif site.is_dir():
        shutil.rmtree(site)


def _in_place(site: Path) -> bool:
    """The folder as cachetool writes it: a real folder holding this install's file (and what Python adds beside
    an imported module, ``__pycache__/``), nothing else."""
    if site.is_symlink() or not site.is_dir() or (site / MODULE).is_symlink():
        return False
    try:
        names = {p.name for p in site.iterdir()} - {"__pycache__"}
        return names == {MODULE} and (site / MODULE).read_bytes() == source_file().read_bytes()
    except OSError:
        return False


def _remove_unfinished(root: Path) -> None:
    """Folders a settle made and was stopped before it renamed them (``.cachetool-site.*``), a minute old or more:
    a younger one may be another settle's, still being written."""
    for made in Path(root).glob(f"{SITE}.*"):
        try:
            if made.is_dir() and not made.is_symlink() and time.time() - made.stat().st_mtime > 60:
                shutil.rmtree(made, ignore_errors=True)
        except OSError:
            continue


def settle(root: Path, torch_versions: list[str]) -> Path | None:
    """Write ``{root}/.cachetool-site`` where the root needs it (coordinate-descent results, and one of
    ``torch_versions``, those its facts record, that does not use them), else remove what lies at that name; the
    folder, or None. The folder is made beside its place and renamed into it: a program starting meanwhile sees
    the old folder, none, or the whole new one."""
    site = Path(root) / SITE
    _remove_unfinished(root)
    if not any(autotune_reuse.needed(v) for v in torch_versions) or not has_coordesc_results(root):
        _remove(site)
        return None
    if _in_place(site):
        return site
    made = Path(tempfile.mkdtemp(prefix=f"{SITE}.", dir=root))
    try:
        shutil.copyfile(source_file(), made / MODULE)
        os.chmod(made, 0o755)
        _remove(site)
        os.rename(made, site)
    except OSError:
        if not _in_place(site):  # another start's settle put the same folder in place first: done
            raise
    finally:
        shutil.rmtree(made, ignore_errors=True)  # gone once renamed
    return site


def variables(root: Path) -> dict[str, str]:
    """``PYTHONPATH`` naming the folder, where the root has it as cachetool writes it (a server puts it before its
    own entries)."""
    site = Path(root) / SITE
    return {"PYTHONPATH": str(site)} if _in_place(site) else {}
