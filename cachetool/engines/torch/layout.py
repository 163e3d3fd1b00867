"""A ``--engine torch`` cache root as a bundle layout.

::

    {root}/
      inductor/                   TORCHINDUCTOR_CACHE_DIR of the program: fxgraph/ (FX-graph cache), aotautograd/,
                                  the generated code and kernels ({2 chars}/: .py, .cpp, .so, autotune results)
      triton/                     TRITON_CACHE_DIR of the program: one folder per Triton kernel
      facts/{key}/cache_key_factors.json   what a warm recorded: the facts the caches depend on (see key.py)
      .cachetool-site/sitecustomize.py     written by a warm and an install where a torch 2.11-2.13 program needs
                                           it to use the root's coordinate-descent results (autotune_site.py)

Inductor and Triton name what they write by content, so the install units are the shallowest folders under
``inductor/`` and ``triton/`` that hold files (a code folder, an FX-graph entry, a kernel): an install adds the
ones a root lacks and leaves the program's own. ``inductor/locks/`` (the lock files Inductor makes as it needs
them) is not shipped, nor the marks of starts (``.cachetool-incomplete/torch-*.json``): while one is there, no unit is
packed (:func:`incomplete_reason`). Each ``facts/{key}`` folder is a unit of its own, listed as the manifest's key. (A top
folder with files lying loose in it is one unit, whole.) ``.cachetool-site/`` is not shipped either: an install
writes it from cachetool's own files (:func:`settle_installed`, :mod:`cachetool.engines.torch.autotune_site`).
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

from cachetool.engines.root_names import FACTORS_FILE, INCOMPLETE_DIR
from cachetool.engines.torch.root_names import FACTS, INDUCTOR, SITE, TRITON
from cachetool.errors import UsageError
from cachetool.layouts.base import LayoutScan, ScannedFile, walk_tree
from cachetool.layouts.entries import KeyFolder, Unit
from cachetool.layouts.factors import Factors

NAME = "torch"
KIND = "program"  # the key kind of its manifests: the facts one program's warm recorded
NOT_SHIPPED = ("locks",)  # under inductor/
KERNEL_SUFFIXES = (".so", ".cubin", ".hsaco", ".ptx")  # in a Triton kernel's folder
MARK_PREFIX = "torch-"  # a start's mark in {root}/.cachetool-incomplete/ (cachetool.engines.torch.unfinished)
ROOT_NAMES = (INDUCTOR, TRITON, FACTS)  # what its root holds at its top (prune's test of a root)

__all__ = [
    "FACTS",
    "INDUCTOR",
    "KIND",
    "MARK_PREFIX",
    "NAME",
    "ROOT_NAMES",
    "SITE",
    "TRITON",
    "detect",
    "incomplete_reason",
    "invalid_units",
    "kernel_files",
    "key_folders",
    "marks",
    "read_mark",
    "recorded_torch",
    "scan",
    "settle",
    "settle_installed",
]


def _folder(p: Path) -> bool:
    return p.is_dir() and not p.is_symlink()


def key_folders(root: Path) -> list[Path]:
    """The root's ``facts/{key}`` folders that hold recorded facts."""
    facts = Path(root) / FACTS
    if not _folder(facts):
        return []
    return sorted(d for d in facts.iterdir() if _folder(d) and (d / FACTORS_FILE).is_file())


def detect(path: Path) -> bool:
    try:
        return bool(key_folders(path))
    except OSError:
        return False


def _read_factors(folder: Path) -> Factors | None:
    try:
        doc = json.loads((folder / FACTORS_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{folder / FACTORS_FILE} is not valid JSON ({exc})") from None
    return Factors.parse(doc.get("factors")) if isinstance(doc, dict) else None


def _unit_folders(top: Path) -> list[Path]:
    """The shallowest folders under ``top`` holding a file (each a unit, whatever lies below it); ``top`` itself
    where files lie loose in it."""
    if any(not c.is_dir() or c.is_symlink() for c in top.iterdir()):
        return [top]
    out: list[Path] = []
    stack = [top]
    while stack:
        d = stack.pop()
        children = sorted(d.iterdir(), key=lambda c: c.name)
        if d != top and any(not c.is_dir() or c.is_symlink() for c in children):
            out.append(d)  # files here (a symlink or a device too: walk_tree refuses it by name)
            continue
        stack += [c for c in reversed(children) if not (d == top and top.name == INDUCTOR and c.name in NOT_SHIPPED)]
    return sorted(out)


def _mode(folder: Path) -> int:
    return (stat.S_IMODE(os.lstat(folder).st_mode) & 0o777) | 0o700


def scan(path: Path) -> LayoutScan:
    root = Path(path)
    keys = key_folders(root)
    if not keys:
        raise UsageError(f"{root} holds no {FACTS}/{{key}}/{FACTORS_FILE}: warm it with cachetool warm --engine torch")
    files: list[ScannedFile] = []
    dirs: dict[str, int] = {}
    units: list[Unit] = []
    unit_dirs: dict[str, Path] = {}
    tops = [root / name for name in (INDUCTOR, TRITON) if _folder(root / name)]
    for folder, key in [(f, None) for top in tops for f in _unit_folders(top)] + [(k, k.name) for k in keys]:
        rel = folder.relative_to(root).as_posix()
        f, d = walk_tree(folder, rel)
        files += f
        dirs.update(d)
        units.append(Unit(rel, key, None))
        unit_dirs[rel] = folder
        for parent in list(Path(rel).parents)[:-1]:  # the folders above a unit
            dirs.setdefault(parent.as_posix(), _mode(root / parent))
    return LayoutScan(
        kind=NAME,
        files=files,
        dirs=sorted(dirs.items()),
        units=units,
        keys=[KeyFolder(k.name, KIND, _read_factors(k)) for k in keys],
        ranks=[],
        save_format=None,
        unit_dirs=unit_dirs,
    )


def kernel_files(root: Path) -> dict[str, set[str]]:
    """What the root holds of built code, by kind (a new one is one built): Inductor's C++ kernel libraries
    (``inductor/**.so``), Triton's kernels (a folder of ``triton/`` per kernel) and Inductor's autotuning results
    (``inductor/**.best_config``)."""
    out: dict[str, set[str]] = {"cpp": set(), "triton": set(), "autotune": set()}
    if _folder(root / INDUCTOR):
        for p in (root / INDUCTOR).rglob("*"):
            if p.suffix == ".so":
                out["cpp"].add(str(p))
            elif p.suffix == ".best_config":
                out["autotune"].add(str(p))
    if _folder(root / TRITON):
        out["triton"] = {str(p.parent) for p in (root / TRITON).rglob("*") if p.suffix in KERNEL_SUFFIXES}
    return out


def marks(root: Path) -> list[Path]:
    """The marks of the starts on ``root`` that have not finished (:mod:`cachetool.engines.torch.unfinished`)."""
    folder = Path(root) / INCOMPLETE_DIR
    return sorted(folder.glob(f"{MARK_PREFIX}*.json")) if _folder(folder) else []


def read_mark(mark: Path) -> dict:
    """A mark's fields (``pid``, ``host``, ``process_start``, ``started``); empty where it cannot be read."""
    try:
        doc = json.loads(mark.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def incomplete_reason(unit_dir: Path, ranked: bool) -> str | None:
    """Why no unit of the root that holds ``unit_dir`` may be packed: a start on it has not finished (it runs, or
    was killed) and may have cut a kernel short; None otherwise."""
    root = next((p.parent for p in (Path(unit_dir), *Path(unit_dir).parents) if p.name in ROOT_NAMES), None)
    left = marks(root) if root is not None else []
    if not left:
        return None
    doc = read_mark(left[0])
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(doc.get("started") or 0)))
    return (
        f"a start of {when} (pid {doc.get('pid')}) has not finished on {root}: it runs, or was killed, and may "
        f"have cut a kernel short; the next start on the root settles it (mark: {left[0]})"
    )


def recorded_torch(root: Path) -> list[str]:
    """The torch releases the root's recorded facts name (``compiler``'s ``torch``), one a key folder."""
    versions = []
    for folder in key_folders(Path(root)):
        try:
            factors = _read_factors(folder)
        except UsageError:
            continue
        version = (factors.values("compiler") or {}).get("torch") if factors is not None else None
        if isinstance(version, str):
            versions.append(version)
    return versions


def settle(root: Path) -> None:
    """The root's site folder written again from this install where its facts and results need it, else removed
    (:func:`cachetool.engines.torch.autotune_site.settle`): after an install, and before a warm's or a check's
    program runs."""
    from cachetool.engines.torch import autotune_site

    autotune_site.settle(Path(root), recorded_torch(root))


def settle_installed(root: Path) -> None:
    """After an install: :func:`settle`."""
    settle(root)


def invalid_units(manifest, root: Path) -> dict[str, str]:
    """The units of a torch bundle outside the layout's folders (``inductor/``, ``triton/``, ``facts/``): no warm
    packs them, so a bundle that holds one was made by hand; an install skips them (``.cachetool-site/``, the code a
    program runs at start-up, is cachetool's to write)."""
    tops = (INDUCTOR, TRITON, FACTS)
    return {u.path: "not a folder of the torch layout" for u in manifest.units if u.path.split("/")[0] not in tops}
