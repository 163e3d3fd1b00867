"""Where vLLM loads a compiled piece from, and so whether a pulled root hits at another path than the warm's.

Each piecewise folder's ``vllm_compile_cache.py`` (a Python literal vLLM reads with ``ast.literal_eval``) maps each
compiled piece to the handle vLLM's Inductor adaptor returned when it saved it: ``(key, path)``, ``path`` the
absolute path the warm wrote the artifact at. vLLM 0.26 (the CUDA build tested on the H200/H100) loads the piece
from that path (``InductorStandaloneAdaptor.load``: ``handle[1]``); the tested CPU releases (0.28 on) join ``key``
to the folder they read. So a 0.26 root pulled to another path reads its pieces from the warm's path: where that
path is gone (a fresh pod), the load fails and vLLM compiles again. That root is not relocatable; an install says
so in one line, naming the path to pull into (:func:`note`).
"""

from __future__ import annotations

import ast
from pathlib import Path

from cachetool.engines.vllm import releases

__all__ = ["CACHE_FILE", "note", "saved_at"]

CACHE_FILE = "vllm_compile_cache.py"
TCC = "torch_compile_cache"


def _paths(cache_file: Path) -> list[str]:
    """The saved paths (``handle[1]``) of one ``vllm_compile_cache.py``; none where it is not vLLM's literal."""
    try:
        entries = ast.literal_eval(cache_file.read_text())
    except (OSError, ValueError, SyntaxError, UnicodeDecodeError):
        return []
    out = []
    for value in entries.values() if isinstance(entries, dict) else ():
        handle = value.get("graph_handle") if isinstance(value, dict) else value
        if isinstance(handle, (tuple, list)) and len(handle) == 2 and isinstance(handle[1], str):
            out.append(handle[1])
    return out


def saved_at(root: Path) -> dict[str, str]:
    """The piecewise folders of ``root`` (relative) whose pieces were saved under another cache root, each with that
    root (the part of the saved path before ``/torch_compile_cache/``)."""
    root = Path(root)
    out = {}
    for cache_file in sorted((root / TCC).glob(f"*/rank_*/*/{CACHE_FILE}")):
        for path in _paths(cache_file):
            warm_root, sep, _ = path.partition(f"/{TCC}/")
            if sep and Path(path).is_absolute() and Path(warm_root) != root:
                out[str(cache_file.parent.relative_to(root))] = warm_root
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
        f"warm saved them at ({', '.join(warm_roots)}): a server on {root} compiles them again unless that path "
        f"holds them (not relocatable); pull into {warm_roots[0]}"
    )
