"""Make identical tensor-parallel rank folders byte-identical, so that a bundle stores them once.

Every TP rank traces the same graphs (the rank's weights and vocabulary range are graph inputs, the collectives
carry a group name that is the same on every rank), so every rank compiles the same pieces. Inductor's saved
artifacts are nevertheless not byte-reproducible (they embed compile timings, object addresses and the build
folder of the ``.so`` files), so content-addressed dedupe would store each rank's copy. After a TP warm,
:func:`share_rank_folders` checks that each rank's ``compile_index.json`` maps every piece to the same graph
hash, shape and artifact name as the source rank's (rank 0 of the same data-parallel rank), and then replaces that
rank's prefix folder with a byte copy of the source's (copy to a temporary sibling, then rename: never a partial
folder). A rank whose graphs differ is left alone and reported.

Loading rank 0's artifacts on another rank is what a hot start of that rank then does; the TP tests check that it
compiles nothing and gives the TP=1 outputs.

On CUDA, same graphs are not the same code: Inductor writes the device index into the generated GPU code
(``torch.cuda._DeviceGuard(1)``, ``set_device(1)``, ``device='cuda:1'``), and the launcher gives rank ``r`` the
device ``cuda:{r}``. A byte copy of rank 0's folder would make rank ``r`` run its kernels on GPU 0. So ranks whose
compiler factors say ``device_type == "cuda"`` are shared only when the caller states ``device_index_free=True``:
every rank process saw its own GPU as ``cuda:0`` (``CUDA_VISIBLE_DEVICES`` set per process, as process-per-GPU
launchers do), so every rank compiled for ``cuda:0``. A rank whose compiler factors differ from rank 0's (another
GPU model, another build), or whose factors cannot be read, is left alone too: only what is provably the same
code is shared.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from compiler.artifacts import CompileIndex
from compiler.cache_key import FACTORS_FILE, CacheKey
from compiler.layout import INDEX_FILE

_RANK_DIR = re.compile(r"^rank_(\d+)_(\d+)$")


def _index_signature(prefix_dir: Path) -> dict[str, tuple[Any, ...]] | None:
    """What a prefix folder's index records per piece (graph hash, shape, artifact, format), read through
    :class:`compiler.artifacts.CompileIndex`; None when there is no index with pieces to compare (absent,
    unreadable, another schema, or malformed)."""
    path = prefix_dir / INDEX_FILE
    if not path.is_file():
        return None
    try:
        index = CompileIndex.open(path, prefix_dir.parent.parent.name)
    except (KeyError, TypeError, AttributeError):  # an entry without its fields: not an index we can vouch for
        return None
    if not index.pieces:
        return None
    return {k: (e.graph_hash, e.shape, e.artifact, e.format) for k, e in index.pieces.items()}


def _compiler_factors(prefix_dir: Path) -> dict[str, Any] | None:
    """The ``compiler`` factor values of a prefix folder (device type, device name, torch/triton builds), read
    through :meth:`compiler.cache_key.CacheKey.read`, or None."""
    try:
        values = CacheKey.read(prefix_dir / FACTORS_FILE).factors.values("compiler")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return values if isinstance(values, dict) else None


def _same_code(src: Path, dest: Path, device_index_free: bool) -> str | None:
    """None when ``dest`` may become a copy of ``src``; else why not."""
    a, b = _compiler_factors(src), _compiler_factors(dest)
    if a is None or b is None:
        return f"no readable compiler factors in {FACTORS_FILE}"
    if a != b:
        return "its compiler factors (device, builds) differ"
    if a.get("device_type") != "cpu" and not device_index_free:
        return (
            f"{a.get('device_type')} code names the rank's device index; shared only when every rank ran with "
            "its GPU as cuda:0"
        )
    return None


def _replace_with_copy(src: Path, dest: Path) -> None:
    tmp = dest.parent / f".{dest.name}.share-tmp"
    old = dest.parent / f".{dest.name}.share-old"
    for p in (tmp, old):
        if p.exists():
            shutil.rmtree(p)
    shutil.copytree(src, tmp, symlinks=True)
    os.replace(dest, old)
    os.replace(tmp, dest)
    shutil.rmtree(old, ignore_errors=True)


def share_rank_folders(
    hash_dir: str | os.PathLike[str], *, dp_rank: int | None = None, device_index_free: bool = False
) -> dict[str, str]:
    """For every ``rank_{r}_{dp}`` folder (``r > 0``) in ``hash_dir`` whose prefix folders compiled the same
    pieces as ``rank_0_{dp}``'s, for the same device (see the module docstring: GPU ranks only with
    ``device_index_free``), make them byte copies of rank 0's. Returns ``{rank folder: outcome}`` where the
    outcome is ``"shared"``, ``"source"`` or a reason it was left alone."""
    root = Path(hash_dir)
    ranks: dict[tuple[int, int], Path] = {}
    for child in sorted(root.iterdir()) if root.is_dir() else []:
        m = _RANK_DIR.match(child.name)
        if m and child.is_dir():
            ranks[(int(m.group(1)), int(m.group(2)))] = child
    report: dict[str, str] = {}
    for (tp, dp), rank_dir in sorted(ranks.items()):
        if dp_rank is not None and dp != dp_rank:
            continue
        if tp == 0:
            report[rank_dir.name] = "source"
            continue
        source = ranks.get((0, dp))
        if source is None:
            report[rank_dir.name] = f"left alone: no rank_0_{dp}"
            continue
        prefixes = sorted(p.name for p in source.iterdir() if p.is_dir())
        outcome = "shared"
        plan: list[tuple[Path, Path]] = []
        for prefix in prefixes:
            src, dest = source / prefix, rank_dir / prefix
            a, b = _index_signature(src), _index_signature(dest)
            if a is None or b is None:
                outcome = f"left alone: no readable {INDEX_FILE} in {prefix}"
                break
            if a != b:
                outcome = f"left alone: its {prefix} pieces differ from rank_0_{dp}'s"
                break
            why = _same_code(src, dest, device_index_free)
            if why is not None:
                outcome = f"left alone: {why}"
                break
            plan.append((src, dest))
        if outcome == "shared":
            for src, dest in plan:
                _replace_with_copy(src, dest)
        report[rank_dir.name] = outcome
    return report
