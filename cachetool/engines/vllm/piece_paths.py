"""Where vLLM loads a compiled piece from, and so whether a pulled root hits at another path than the warm's.

Each piecewise folder's ``vllm_compile_cache.py`` (a Python literal vLLM reads with ``ast.literal_eval``) maps each
compiled piece, ``(range, graph index, compiler name)``, to the handle the compiler returned when it saved it. For
``inductor_standalone`` (vLLM's default adaptor) the handle is ``(key, path)``, ``path`` the absolute path the warm
wrote the artifact at: vLLM 0.26 (the CUDA build tested on the H100/H200) loads the piece from that path
(``InductorStandaloneAdaptor.load``: ``handle[1]``, read in its source); vLLM 0.32 joins ``key`` to the folder it
reads. (The older ``inductor`` adaptor looks its pieces up by hash: not bound to a path.) So a 0.26 root pulled to
another path reads its pieces from the warm's path, and where that path is gone (a fresh pod) the server does not
start (vLLM 0.26 on the H100, 2026-12-06: the GPU acceptance's ``moved`` row). That root is not relocatable.

A pack records where each piecewise key folder's pieces were saved as a key folder of kind ``pieces`` (named
``pieces.{hash}``, like the JIT caches' facts: :func:`key_folders`), so that a pull for a server refuses the bundle
before any download where the vLLM that will serve it loads pieces by that path and the root is elsewhere
(:func:`refuse_elsewhere`, from the server's key check): a miss, after which ``--on-miss continue`` starts the
server cold, where an installed root would have stopped it. A root installed without that check (``install`` of a
file, a bundle packed before the record) gets one line from the install instead, naming the path to pull into
(:func:`note`), and a check on it is a miss without starting vLLM where the warm's path does not hold the pieces.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any, TypeGuard

from cachetool.engines.root_names import TCC
from cachetool.engines.vllm import releases
from cachetool.errors import PreflightError
from cachetool.layouts.entries import KeyFolder
from cachetool.layouts.factors import Factors

__all__ = ["CACHE_FILE", "KIND", "key_folders", "note", "refuse_elsewhere", "saved_at"]

CACHE_FILE = "vllm_compile_cache.py"
STANDALONE = "inductor_standalone"  # the adaptor whose handle is (key, the absolute path it saved the piece at)
KIND = "pieces"  # the manifest's key folder that records {"root": the root a key folder's pieces were saved under}
PREFIX = "pieces."  # its name: the piecewise key folder's, prefixed


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


def _binds(vllm_version: str | None) -> bool:
    """Whether this release is known to load its pieces from the path they were saved at (not: it joins the key, or
    it is not known either way)."""
    return vllm_version is not None and releases.loads_pieces_by_saved_path(vllm_version) is True


def _absolute(path: object) -> TypeGuard[str]:
    """Whether ``path`` (read from a cache file or a manifest) is an absolute path a file system can hold."""
    return isinstance(path, str) and os.path.isabs(path) and "\x00" not in path


def _warm_roots(root: Path) -> dict[str, tuple[str, list[str]]]:
    """Every piecewise folder of ``root`` (relative) whose pieces name the path they were saved at: the cache root
    that path lies under (the part before ``/torch_compile_cache/``; ``/`` for an empty one) and those paths."""
    root = Path(root)
    out = {}
    for cache_file in sorted((root / TCC).glob(f"*/rank_*/*/{CACHE_FILE}")):
        folder = cache_file.parent.relative_to(root).as_posix()
        mine = [p for p in _paths(cache_file) if _absolute(p)]
        for path in mine:
            warm_root, sep, below = path.rpartition(f"/{TCC}/")
            if sep and below.startswith(folder.split("/", 1)[1] + "/"):  # this folder's piece
                out[folder] = (warm_root or "/", mine)
                break
    return out


def saved_at(root: Path, missing_only: bool = False) -> dict[str, str]:
    """The piecewise folders of ``root`` (relative) whose pieces were saved under another cache root, each with that
    root; a link to this root is this root. ``missing_only``: only those whose saved pieces are not there (a fresh
    pod; on a node that kept the warm's root, vLLM 0.26 still finds them)."""
    here = os.path.realpath(root)
    return {
        folder: warm
        for folder, (warm, paths) in _warm_roots(root).items()
        if os.path.realpath(warm) != here and (not missing_only or not all(os.path.exists(p) for p in paths))
    }


def key_folders(root: Path) -> list[KeyFolder]:
    """Where the pieces of each piecewise key folder of ``root`` were saved, as the manifest lists it (kind
    :data:`KIND`): what :func:`refuse_elsewhere` compares before any download."""
    by_hash: dict[str, str] = {}
    for folder, (saved_root, _saved) in _warm_roots(root).items():
        by_hash.setdefault(folder.split("/")[1], saved_root)
    out = []
    for key_hash, saved_root in sorted(by_hash.items()):
        out.append(KeyFolder(PREFIX + key_hash, KIND, Factors.recording(KIND, {"root": saved_root})))
    return out


def refuse_elsewhere(manifest: Any, root: Path, vllm_version: str | None) -> None:
    """:class:`PreflightError` where the vLLM that will serve ``root`` (``vllm_version``) loads compiled pieces from
    the path they were saved at and the bundle's were saved under another root: a server on ``root`` would not start
    (vLLM 0.26 on the H100). Nothing where the release joins the key, or is not known either way."""
    if not _binds(vllm_version):
        return
    here = os.path.realpath(root)
    saved = set()
    for k in manifest.keys:
        values = k.recorded(KIND)
        path = values.get("root") if isinstance(values, dict) else None
        if _absolute(path) and os.path.realpath(path) != here:
            saved.add(path)
    if saved:
        where = sorted(saved)
        raise PreflightError(
            f"preflight: bundle cannot hit here: vLLM {vllm_version} loads its compiled pieces from the path the "
            f"warm saved them at, not {root}: a server here does not start (not relocatable); pull into "
            + (where[0] if len(where) == 1 else f"one root: they were saved under {len(where)} ({', '.join(where)})")
        )


def note(root: Path, vllm_version: str | None, missing_only: bool = False) -> str | None:
    """One line where the vLLM that serves ``root`` (``vllm_version``) loads pieces by the path they were saved at
    and ``root`` holds pieces saved under another root (``missing_only``: only where they are not there); None
    otherwise (a release that joins the key, or one not known either way)."""
    if not _binds(vllm_version):
        return None
    elsewhere = saved_at(root, missing_only)
    if not elsewhere:
        return None
    warm_roots = sorted(set(elsewhere.values()))
    return (
        f"vLLM {vllm_version} loads the compiled pieces of {len(elsewhere)} folder(s) under {root} from the path the "
        f"warm saved them at ({', '.join(warm_roots)}): where that path does not hold them, a server on {root} "
        f"fails to start (not relocatable); pull into {warm_roots[0]}"
    )
