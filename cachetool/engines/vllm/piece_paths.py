"""Where vLLM loads a compiled piece from, and so whether a pulled root hits at another path than the warm's.

Each piecewise folder's ``vllm_compile_cache.py`` (a Python literal vLLM reads with ``ast.literal_eval``) maps each
compiled piece, ``(range, graph index, compiler name)``, to the handle the compiler returned when it saved it. For
``inductor_standalone`` (vLLM's default adaptor) the handle is ``(key, path)``, ``path`` the absolute path the warm
wrote the artifact at: vLLM 0.26 (the CUDA build tested on the H100/H200) loads the piece from that path
(``InductorStandaloneAdaptor.load``: ``handle[1]``, read in its source); vLLM 0.32 joins ``key`` to the folder it
reads. (The older ``inductor`` adaptor looks its pieces up by hash: not bound to a path.) So a 0.26 root pulled to
another path reads its pieces from the warm's path, and where that path is gone (a fresh pod) the server does not
start (vLLM 0.26 on the H100, 2026-12-06: the GPU acceptance's ``moved`` row). That root is not relocatable; an install says so in one line, naming the path to pull into (:func:`note`).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

from cachetool.engines.vllm import releases

__all__ = ["CACHE_FILE", "note", "saved_at"]

CACHE_FILE = "vllm_compile_cache.py"
TCC = "torch_compile_cache"
STANDALONE = "inductor_standalone"  # the adaptor whose handle is (key, the absolute path it saved the piece at)


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


def saved_at(root: Path) -> dict[str, str]:
    """The piecewise folders of ``root`` (relative) whose pieces were saved under another cache root, each with that
    root (the part of the saved path before ``/torch_compile_cache/``)."""
    root = Path(root)
    here = os.path.realpath(root)
    out = {}
    for cache_file in sorted((root / TCC).glob(f"*/rank_*/*/{CACHE_FILE}")):
        folder = cache_file.parent.relative_to(root).as_posix()
        for path in _paths(cache_file):
            warm_root, sep, below = path.rpartition(f"/{TCC}/")
            # the saved path names this folder's piece under another root: a link to this root is this root
            if sep and os.path.isabs(path) and below.startswith(folder.split("/", 1)[1] + "/"):
                if os.path.realpath(warm_root) != here:
                    out[folder] = warm_root
                    break
    return out


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
