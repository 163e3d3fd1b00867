"""Where vLLM loads a compiled piece from, and so whether a pulled root hits at another path than the warm's.

Each piecewise folder's ``vllm_compile_cache.py`` (a Python literal vLLM reads with ``ast.literal_eval``) maps each
compiled piece, ``(range, graph index, compiler name)``, to the handle the compiler returned when it saved it. For
``inductor_standalone`` (vLLM's default adaptor) the handle is ``(key, path)``, ``path`` the absolute path the warm
wrote the artifact at: vLLM 0.26 (the CUDA build tested on the H100/H200) loads the piece from that path
(``InductorStandaloneAdaptor.load``: ``handle[1]``, read in its source); vLLM 0.32 joins ``key`` to the folder it
reads. (The older ``inductor`` adaptor looks its pieces up by hash: not bound to a path.) So a 0.26 root pulled to
another path reads its pieces from the warm's path, and where that path is gone (a fresh pod) the server does not
start (vLLM 0.26 on the H100, 2026-12-06: the GPU acceptance's ``moved`` row). That root is not relocatable.

A pack records, as a factor of each such piecewise key folder (``pieces``: ``{"root": the warm's root}``), where
its pieces were saved (:func:`with_saved_roots`), so that a pull refuses the bundle before any download where the
vLLM that serves the root loads pieces by that path and the root is elsewhere (:func:`refuse_elsewhere`): a miss,
after which ``--on-miss continue`` starts the server cold, where an installed root would have stopped it. A root
installed without that preflight (or from a bundle packed before the factor) gets one line from the install
instead, naming the path to pull into (:func:`note`), and a check on it is a miss without starting vLLM.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from cachetool.engines.vllm import releases
from cachetool.errors import PreflightError
from cachetool.layouts.entries import KeyFolder
from cachetool.layouts.factors import Factors

__all__ = ["CACHE_FILE", "FACTOR", "note", "refuse_elsewhere", "saved_at", "with_saved_roots"]

CACHE_FILE = "vllm_compile_cache.py"
TCC = "torch_compile_cache"
STANDALONE = "inductor_standalone"  # the adaptor whose handle is (key, the absolute path it saved the piece at)
FACTOR = "pieces"  # a piecewise key folder's factor in a manifest: {"root": the root its pieces were saved under}
PIECEWISE = "piecewise"  # the kind of those key folders


def _paths(cache_file: Path) -> list[str]:
    """The saved paths (``handle[1]``) of the standalone adaptor's pieces in one ``vllm_compile_cache.py``; none
    where it is not vLLM's literal."""
    try:
        entries = ast.literal_eval(cache_file.read_text())
    except (OSError, ValueError, SyntaxError, UnicodeDecodeError, MemoryError, RecursionError):
        return []
    out = []
    for piece, value in entries.items() if isinstance(entries, dict) else ():
        if not (isinstance(piece, tuple) and len(piece) == 3 and piece[2] == STANDALONE):
            continue
        handle = value.get("graph_handle") if isinstance(value, dict) else value
        if isinstance(handle, (tuple, list)) and len(handle) == 2 and all(isinstance(h, str) for h in handle):
            out.append(handle[1])
    return out


def _warm_roots(root: Path) -> dict[str, str]:
    """Every piecewise folder of ``root`` (relative) whose pieces name the path they were saved at, with the cache
    root that path lies under (the part before ``/torch_compile_cache/``)."""
    root = Path(root)
    out = {}
    for cache_file in sorted((root / TCC).glob(f"*/rank_*/*/{CACHE_FILE}")):
        folder = cache_file.parent.relative_to(root).as_posix()
        for path in _paths(cache_file):
            warm_root, sep, below = path.rpartition(f"/{TCC}/")
            if sep and os.path.isabs(path) and below.startswith(folder.split("/", 1)[1] + "/"):  # this folder's piece
                out[folder] = warm_root
                break
    return out


def saved_at(root: Path) -> dict[str, str]:
    """The piecewise folders of ``root`` (relative) whose pieces were saved under another cache root, each with that
    root; a link to this root is this root."""
    here = os.path.realpath(root)
    return {folder: warm for folder, warm in _warm_roots(root).items() if os.path.realpath(warm) != here}


def with_saved_roots(keys: list[KeyFolder], root: Path) -> list[KeyFolder]:
    """``keys`` (a scan of ``root``), each piecewise key folder whose pieces name their saved path with the factor
    :data:`FACTOR`: the root they were saved under, which :func:`refuse_elsewhere` compares before any download."""
    by_hash: dict[str, str] = {}
    for folder, saved_root in _warm_roots(root).items():
        by_hash.setdefault(folder.split("/")[1], saved_root)
    out = []
    for k in keys:
        warm_root = by_hash.get(k.hash) if k.kind == PIECEWISE else None
        if warm_root is None:
            out.append(k)
            continue
        values = {"root": warm_root}
        entry = {"hash": hashlib.sha256(json.dumps(values).encode()).hexdigest(), "values": values}
        out.append(KeyFolder(k.hash, k.kind, Factors({**(k.factors.to_json() if k.factors else {}), FACTOR: entry})))
    return out


def refuse_elsewhere(manifest: Any, root: Path, vllm_version: str | None) -> None:
    """:class:`PreflightError` where the vLLM that will serve ``root`` (``vllm_version``) loads compiled pieces from
    the path they were saved at and the bundle's were saved under another root: a server on ``root`` would not start
    (vLLM 0.26 on the H100). Nothing where the release joins the key, or is not known either way."""
    if vllm_version is None or releases.loads_pieces_by_saved_path(vllm_version) is not True:
        return
    here = os.path.realpath(root)
    for k in manifest.keys:
        values = k.factors.values(FACTOR) if k.kind == PIECEWISE and k.factors is not None else None
        saved = values.get("root") if isinstance(values, dict) else None
        if isinstance(saved, str) and os.path.isabs(saved) and os.path.realpath(saved) != here:
            raise PreflightError(
                f"preflight: bundle cannot hit here: vLLM {vllm_version} loads its compiled pieces from the path the "
                f"warm saved them at, not {root}: a server here does not start (not relocatable); pull into {saved}"
            )


def note(root: Path, vllm_version: str | None) -> str | None:
    """One line where the vLLM that serves ``root`` (``vllm_version``) loads pieces by the path they were saved at
    and ``root`` holds pieces saved under another root; None otherwise (a release that joins the key, or one not
    known either way)."""
    if vllm_version is None or releases.loads_pieces_by_saved_path(vllm_version) is not True:
        return None
    elsewhere = saved_at(root)
    if not elsewhere:
        return None
    warm_roots = sorted(set(elsewhere.values()))
    return (
        f"vLLM {vllm_version} loads the compiled pieces of {len(elsewhere)} folder(s) under {root} from the path the "
        f"warm saved them at ({', '.join(warm_roots)}): where that path does not hold them, a server on {root} "
        f"fails to start (not relocatable); pull into {warm_roots[0]}"
    )
