"""A real vLLM cache root (``$VLLM_CACHE_ROOT``).

vLLM (V1 engine) writes::

    torch_compile_cache/{hash10}/rank_{r}_{dp}/{prefix}/        piecewise caches: cache_key_factors.json,
        vllm_compile_cache.py, computation_graph.py, transformed_code.py, artifact_compile_range_* files (or
        folders when unpacked) and, in older versions, inductor_cache/ and triton_cache/
    torch_compile_cache/torch_aot_compile/{sha256}/             the AOT path (torch >= 2.10)
        rank_{r}_{dp}/model                                     the saved compiled function, one per rank
        rank_{r}_{dp}/cache_key_factors.json                    written by `cachetool warm --engine vllm`
        inductor_cache/                                         TORCHINDUCTOR_CACHE_DIR, shared by the ranks
    modelinfos/{module}-{Class}.json                            the model registry's inspection cache
    triton_cache/                                               TRITON_CACHE_DIR of a cachetool warm or check (and
                                                                of a server started as docs/vllm.md says): the
                                                                Triton kernels vLLM's own ops JIT-compile at start
    inductor_cache/, flashinfer/, deep_gemm/,                   on a GPU, the other JIT caches a start fills, each
    flashinfer_autotune_cache/                                  sent here by its variable (jit_caches.py)

The compile tree is the same shape as the native one; only detection differs. Of each AOT folder's
``inductor_cache/aotautograd/`` only the last start's entries are packed (:func:`stale_aotautograd`; ``cachetool
prune`` removes the others from a local root). The root's ``modelinfos/`` (one
small JSON per architecture, checked by vLLM against its module's hash) and ``triton_cache/`` (Triton's own
content-addressed kernel cache: a folder per kernel hash, valid for the Triton version, GPU and CUDA the bundle's
fingerprint records), and on a GPU the other JIT caches (:mod:`~cachetool.engines.vllm.jit_caches`), are packed
with the root or any folder in it, each an install unit without a rank: a pulled
root without the first makes vLLM start a subprocess to inspect the model class again, without the second every
fresh pod JIT-compiles vLLM's Triton kernels again (12-17 s on the H200).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from cachetool.engines.compile_cache import AOT, RANK_RE, TCC as TCC_NAME, iter_limited, locate, scan_compile_cache
from cachetool.engines.vllm import install_facts, jit_facts, piece_paths, unfinished
from cachetool.engines.vllm.jit_caches import FOLDERS as JIT_FOLDERS, restore_mtimes
from cachetool.engines.vllm.root_names import MODELINFOS
from cachetool.layouts.base import LayoutScan, walk_tree
from cachetool.layouts.entries import Unit

log = logging.getLogger("cachetool.install")  # an install's own lines: what it settled
NAME = "vllm"
MARKERS = (piece_paths.CACHE_FILE,)
SHARED_FOLDERS = (MODELINFOS, *JIT_FOLDERS)  # beside torch_compile_cache/, shared by every rank
ROOT_NAMES = (TCC_NAME, *SHARED_FOLDERS)  # what a vLLM cache root holds at its top


def detect(path: Path) -> bool:
    try:
        hash_dirs, _, _ = locate(path)
    except Exception:
        return False
    for _, _, hdir in hash_dirs:
        if hdir.parent.name == AOT:
            return True
        for e in iter_limited(hdir, max_depth=3):
            if e.name in MARKERS or e.name.startswith("artifact_compile_range_"):
                return True
    return False


# Entries written less than this apart are one start's. A start writes its entries as it loads its pieces (within
# 0.3 s on the H100) or compiles them (torch.compile took 11.4 s in all for the FP8 MoE model there); the next start
# writes its own only after a new process has imported torch and vLLM and loaded the model (34 to 37 s between two
# CPU starts on this 2-core box, about 70 s between two checks on the H100). Either way a wrong guess costs little:
# a restart sooner than this ships two starts' entries (~200 KB each), a piece that compiled longer than this leaves
# an entry behind, which the pulled root's first start writes again (AOTAutograd over an FX-graph hit, no compile).
SAME_START_SECONDS = 30.0


def stale_aotautograd(tcc: Path) -> list[Path]:
    """The AOTAutograd entries of each AOT key folder's ``inductor_cache/aotautograd/`` but those of its last
    start. What a start writes differs by release: torch 2.13 (vLLM on the CPU) writes one entry per rank and
    start under a fresh key (it names the compiled function with a fresh UUID), which no later start reads, so a
    kept root grows by one entry per rank and restart; torch 2.11 (vLLM 0.26 CUDA) writes one per compiled piece
    (3 for a 4-layer FP8 model on the H100) under keys that stay the same, and the next start on the root finds
    them (it wrote none). So the last start's entries are kept whole: the newest one per rank and every entry
    written less than :data:`SAME_START_SECONDS` before the next newer one."""
    out: list[Path] = []
    for cache in sorted(tcc.glob(f"{AOT}/*/inductor_cache/aotautograd")):
        if cache.is_symlink() or not cache.is_dir():
            continue
        entries = [e for e in cache.iterdir() if e.is_dir() and not e.is_symlink()]
        ranks = sum(1 for r in cache.parent.parent.iterdir() if RANK_RE.match(r.name) and r.is_dir())
        newest_first = sorted(((e.stat().st_mtime, e.name, e) for e in entries), reverse=True)
        kept = max(1, ranks)  # at least one entry per rank
        while kept < len(newest_first) and newest_first[kept - 1][0] - newest_first[kept][0] < SAME_START_SECONDS:
            kept += 1
        out += [e for _mtime, _name, e in newest_first[kept:]]
    return out


def scan(path: Path) -> LayoutScan:
    result = scan_compile_cache(path, NAME)
    _, _, tcc = locate(Path(path))
    if tcc is not None:  # what later starts never read is not shipped
        stale = [str(e) + os.sep for e in stale_aotautograd(tcc)]
        result.files = [f for f in result.files if not str(f.abspath).startswith(tuple(stale))]
        dropped = {f"{TCC_NAME}/{Path(e).relative_to(tcc)}".rstrip("/") for e in stale}
        result.dirs = [(d, m) for d, m in result.dirs if not any(d == x or d.startswith(x + "/") for x in dropped)]
    if tcc is not None:  # where compiled pieces were saved, what each JIT folder is valid under: key folders
        result.keys.extend([*piece_paths.key_folders(tcc.parent), *jit_facts.key_folders(tcc.parent)])
    for name in SHARED_FOLDERS:
        folder = tcc.parent / name if tcc is not None else None  # the root's, also for one key folder
        if folder is not None and folder.is_dir() and not folder.is_symlink():
            files, dirs = walk_tree(folder, name)
            result.files.extend(files)
            result.dirs = sorted([*result.dirs, *dirs])
            result.units.append(Unit(name, None, None))
    return result


def incomplete_reason(unit_dir: Path, ranked: bool) -> str | None:
    """Why the install unit in ``unit_dir`` is not complete: a start of vLLM on its root that did not finish
    (:mod:`cachetool.engines.vllm.unfinished`; nothing in vLLM's own files says so), or None."""
    return unfinished.incomplete_reason(unit_dir)


def stale_entries(root: Path) -> list[Path]:
    """What no later start of a vLLM server on ``root`` reads (``cachetool prune``): the per-start AOTAutograd
    entries but the last start's of each rank (:func:`stale_aotautograd`)."""
    tcc = Path(root) / TCC_NAME
    return stale_aotautograd(tcc) if tcc.is_dir() and not tcc.is_symlink() else []


def invalid_units(manifest, root: Path) -> dict[str, str]:
    """The JIT units that cannot be valid in a root at ``root`` on this machine, with why: an install skips them
    before it downloads anything (:func:`cachetool.engines.vllm.jit_facts.invalid_units`)."""
    return jit_facts.invalid_units(manifest, root)


def settle_installed(root: Path) -> None:
    """After an install: the FlashInfer workspace's files get the modification times the warm recorded, or its
    ninja would rebuild every module (:func:`cachetool.engines.vllm.jit_caches.restore_mtimes`); and where the vLLM
    here loads compiled pieces from the path the warm saved them at, one line says the root is bound to that path
    (:func:`cachetool.engines.vllm.piece_paths.note`)."""
    restore_mtimes(root)
    bound = piece_paths.note(root, install_facts.vllm_version())
    if bound is not None:
        log.warning(bound)
