"""The ``torch_compile_cache/`` tree shared by the native and vLLM engines' layouts (its key kinds are theirs:
``piecewise`` and ``aot``).

::

    {root}/torch_compile_cache/{hash}/rank_{r}_{dp}/{prefix}/...                 piecewise caches
    {root}/torch_compile_cache/torch_aot_compile/{hash}/rank_{r}_{dp}/model ...  vLLM AOT caches

Install units are the rank folders (each is complete or absent after an install). A folder beside the rank
folders (vLLM's AOT ``inductor_cache/``, shared by every rank) is a unit of its own with no rank, so that a pull of
some ranks still gets it; a hash folder holding loose files besides rank folders becomes one unit as a whole.
``cache_key_factors.json`` found in a rank folder (or its prefix folder) gives the key's factors.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from cachetool.engines.root_names import AOT, FACTORS_FILE, RANK_RE, TCC
from cachetool.errors import UsageError
from cachetool.layouts.base import LayoutScan, ScannedFile, walk_tree
from cachetool.layouts.entries import KeyFolder, Unit
from cachetool.layouts.factors import Factors


def _is_dir(p: Path) -> bool:
    return p.is_dir() and not p.is_symlink()


def _hash_rel(kind: str, h: str) -> str:
    return f"{TCC}/{AOT}/{h}" if kind == "aot" else f"{TCC}/{h}"


def _hash_dirs_of_tcc(tcc: Path) -> list[tuple[str, str, Path]]:
    out = []
    for c in sorted(tcc.iterdir(), key=lambda c: c.name):
        if c.is_symlink() or not c.is_dir():
            raise UsageError(f"{c} is not a hash folder (only folders belong in {TCC}/)")
        if c.name == AOT:
            for h in sorted(c.iterdir(), key=lambda c: c.name):
                if h.is_symlink() or not h.is_dir():
                    raise UsageError(f"{h} is not a hash folder")
                out.append(("aot", h.name, h))
        else:
            out.append(("piecewise", c.name, c))
    return out


def locate(path: Path) -> tuple[list[tuple[str, str, Path]], str | None, Path | None]:
    """(hash folders as (kind, hash, real path), the single rank to keep or None, the real torch_compile_cache)."""
    path = Path(path)
    if _is_dir(path / TCC):
        return _hash_dirs_of_tcc(path / TCC), None, path / TCC
    if path.name == TCC:
        return _hash_dirs_of_tcc(path), None, path
    if path.name == AOT and path.parent.name == TCC:
        return [("aot", h.name, h) for h in sorted(path.iterdir()) if _is_dir(h)], None, path.parent
    only_rank = None
    hash_dir = path
    if RANK_RE.match(path.name):
        only_rank, hash_dir = path.name, path.parent
    if hash_dir.parent.name == AOT:
        return [("aot", hash_dir.name, hash_dir)], only_rank, hash_dir.parent.parent
    if hash_dir.parent.name == TCC:
        return [("piecewise", hash_dir.name, hash_dir)], only_rank, hash_dir.parent
    if only_rank or any(RANK_RE.match(c.name) for c in hash_dir.iterdir() if _is_dir(c)):
        # A hash folder copied out of its tree: keep its manifest paths as if it were in place.
        return [("piecewise", hash_dir.name, hash_dir)], only_rank, None
    return [], None, None


def iter_limited(top: Path, max_depth: int = 6, limit: int = 20000):
    """Paths under ``top`` (no symlinks followed), bounded in depth and count: for detection only."""
    n = 0
    stack = [(top, 0)]
    while stack:
        d, depth = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            n += 1
            if n > limit:
                return
            yield e
            if depth < max_depth and e.is_dir(follow_symlinks=False):
                stack.append((Path(e.path), depth + 1))


def read_factors(rank_dirs: list[Path]) -> Factors | None:
    """The first ``cache_key_factors.json`` of a hash folder's ranks, parsed; a file of another shape is kept as
    ``{"raw": ...}`` (diff still compares it field by field)."""
    for r in rank_dirs:
        for cand in sorted(r.glob(FACTORS_FILE)) + sorted(r.glob(f"*/{FACTORS_FILE}")):
            try:
                obj = json.loads(cand.read_text())
            except (OSError, ValueError) as exc:
                raise UsageError(f"{cand} is not valid JSON ({exc})") from None
            if isinstance(obj, dict) and isinstance(obj.get("factors"), dict):
                return Factors(obj["factors"])
            return Factors({"raw": obj})
    return None


def scan_compile_cache(path: Path, kind: str) -> LayoutScan:
    hash_dirs, only_rank, tcc_real = locate(path)
    if not hash_dirs:
        raise UsageError(f"{path} holds no {TCC}/{{hash}}/rank_{{r}}_{{dp}}/ folders")
    files: list[ScannedFile] = []
    dirs: dict[str, int] = {}

    def mode_of(p: Path | None) -> int:
        if p is None or not p.exists():
            return 0o755
        return (stat.S_IMODE(os.lstat(p).st_mode) & 0o777) | 0o700

    dirs[TCC] = mode_of(tcc_real)
    units: list[Unit] = []
    unit_dirs: dict[str, Path] = {}
    keys: list[KeyFolder] = []
    ranks: set[str] = set()
    for kind_, h, hdir in hash_dirs:
        hrel = _hash_rel(kind_, h)
        if kind_ == "aot":
            dirs[f"{TCC}/{AOT}"] = mode_of(hdir.parent if hdir.parent.name == AOT else None)
        dirs[hrel] = mode_of(hdir)
        children = sorted(hdir.iterdir(), key=lambda c: c.name)
        rank_dirs = [c for c in children if RANK_RE.match(c.name) and _is_dir(c)]
        others = [c for c in children if c not in rank_dirs]
        if only_rank:
            rank_dirs = [c for c in rank_dirs if c.name == only_rank]
            if not rank_dirs:
                raise UsageError(f"{hdir / only_rank} is not a rank folder")
            others = [o for o in others if _is_dir(o)]  # one rank still needs the folders every rank shares
        ranks.update(c.name for c in rank_dirs)
        if any(not _is_dir(c) for c in others) or (others and not rank_dirs):
            # Loose files next to the rank folders: the hash folder is installed as one unit.
            f, d = walk_tree(hdir, hrel)
            files.extend(f)
            dirs.update(d)
            units.append(Unit(hrel, h, None))
            unit_dirs[hrel] = hdir
            continue
        # Folders beside the rank folders (vLLM's AOT ``inductor_cache/``) are shared by every rank: each is a
        # unit of its own without a rank, installed with whichever ranks a pull selects.
        for c, rank in [(r, r.name) for r in rank_dirs] + [(o, None) for o in others]:
            f, d = walk_tree(c, f"{hrel}/{c.name}")
            files.extend(f)
            dirs.update(d)
            units.append(Unit(f"{hrel}/{c.name}", h, rank))
            unit_dirs[f"{hrel}/{c.name}"] = c
        keys.append(KeyFolder(h, kind_, read_factors(rank_dirs)))
    if not files and not units:
        raise UsageError(f"{path} holds no cache files")
    return LayoutScan(
        kind=kind,
        files=files,
        dirs=sorted(dirs.items()),
        units=units,
        keys=keys,
        ranks=sorted(ranks),
        save_format=save_format_of(files, dirs),
        unit_dirs=unit_dirs,
    )


def save_format_of(files: list[ScannedFile], dirs: dict[str, int]) -> str | None:
    formats = set()
    for f in files:
        if os.path.basename(f.rel).startswith("artifact_"):
            formats.add("binary")
    for d in dirs:
        if os.path.basename(d).startswith("artifact_"):
            formats.add("unpacked")
    # Files inside an unpacked artifact folder are not "artifact_*" themselves, so this is exact enough.
    if len(formats) > 1:
        return "mixed"
    return formats.pop() if formats else None
