"""Triton's group files, made to name their kernel's files where an install put them.

Triton keeps a group file beside each compiled kernel (``{hash}/__grp__{name}.json``, ``{"child_paths": {file:
path}}``). It names the kernel's files by absolute path, and Triton takes the kernel from its cache only where the named
files exist (``FileCacheManager.get_group``). A Triton cache installed at another path than the warm's still names the
files at the warm's: on a machine without them every lookup misses, and the kernel is compiled again. The kernels at
stake are the ones a start compiles through ``triton.compile``: a library's ``@triton.jit`` kernels (vLLM's own, the
fused MoE ones among them), Inductor's kernels that are not launched statically, and the coordinate-descent winners
that Inductor compiles at load.

So an install rewrites the group files of the units it installed (:func:`rewrite_groups`): the same file names, each
mapped into the folder the group file lies in. It touches no other file: one already naming its own folder (a pull to
the warm's path), one that is not a Triton group, one naming a file its folder lacks, and a link are left as they are
(Triton misses on them and compiles again, as it did before). A pack keeps them as the warm left them, so a cachetool
too old to rewrite them still hits at the warm's path; a later install of the same bundle at another path finds the
rewritten files changed and installs those units again. The group files name the path the install ran at: a volume
mounted elsewhere in the server's container misses. PyTorch does the same for the kernels its FX-graph cache carries
(the ``[REPLACE]`` placeholder of ``torch._inductor.triton_bundler``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

from cachetool.atomic import atomic_write

GROUP_PREFIX = "__grp__"


def is_group_file(name: str) -> bool:
    """Whether a file ``name`` is a Triton group file."""
    return name.startswith(GROUP_PREFIX) and name.endswith(".json")


def group_in(path: Path) -> dict[str, str] | None:
    """The group file at ``path``: file name to path, in its order; None where it is no Triton group (not JSON, no
    ``child_paths`` mapping, a name that is not a plain file name)."""
    try:
        named = json.loads(path.read_text()).get("child_paths")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(named, dict) or not named:
        return None
    if not all(
        isinstance(k, str) and isinstance(v, str) and k not in (".", "..") and "/" not in k for k, v in named.items()
    ):
        return None
    return named


def rewrite_group(path: Path) -> bool:
    """The group file at ``path`` made to name its files in its own folder (the same names, in their order); whether
    it was rewritten."""
    if path.is_symlink() or not path.is_file():
        return False
    named = group_in(path)
    if named is None:
        return False
    folder = path.parent
    here = {name: str(folder / name) for name in named}
    if named == here or not all((folder / n).is_file() and not (folder / n).is_symlink() for n in named):
        return False
    atomic_write(path, json.dumps({"child_paths": here}).encode())
    return True


def rewrite_groups(paths: Iterable[Path], warn: Callable[[str], None]) -> int:
    """:func:`rewrite_group` on each of ``paths``; a file that cannot be rewritten costs a recompile, not the install:
    one line says which. How many were rewritten."""
    rewritten = 0
    for path in paths:
        try:
            rewritten += rewrite_group(path)
        except OSError as exc:
            warn(
                f"Triton's group file {path} still names the warm's paths ({exc.strerror or exc}): its kernel "
                "compiles again at its first start"
            )
    return rewritten
