"""Triton's group files, written for the folder they are in.

Triton keeps a group file beside each compiled kernel (``{hash}/__grp__{name}.json``, ``{"child_paths": {file:
path}}``). It names the kernel's files by absolute path, and Triton takes the kernel from its cache only where the named
files exist (``FileCacheManager.get_group``). A Triton cache copied to another path still names the files at the
old one: on a machine without them every lookup misses, and the kernel is compiled again. The kernels at stake are
the ones a start compiles through ``triton.compile``: a library's ``@triton.jit`` kernels (vLLM's own, the fused MoE
ones among them), Inductor's kernels that are not launched statically, and the coordinate-descent winners that
Inductor compiles at load.

So an install writes the group files of the kernel folders it lands in for where they are (:func:`write_groups`),
and leaves alone the ones Triton already finds its kernel through (at the warm's own path). A pack keeps them as the
warm left them: a cachetool too old to write them, pulling at the warm's path, still hits. A later install of the same
bundle finds a rewritten group file present, whatever its bytes (:func:`is_group_file`). PyTorch does the same for
the kernels its FX-graph cache carries (the ``[REPLACE]`` placeholder of ``torch._inductor.triton_bundler``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

GROUP_PREFIX = "__grp__"
# what a Triton compile leaves beside its metadata (``{name}.json``): a folder holding one of these is a kernel's
KERNEL_FILES = (".cubin", ".hsaco", ".ptx", ".ttir", ".ttgir", ".llir", ".amdgcn", ".spv", ".zebin", ".source")


def is_group_file(name: str) -> bool:
    """Whether a file ``name`` is a Triton group file: an install compares it by presence, not bytes."""
    return name.startswith(GROUP_PREFIX) and name.endswith(".json")


def kernel_names(names: set[str]) -> list[str]:
    """The kernels compiled into a folder of file ``names``: each ``{name}.json`` with a compiled file of the same
    name beside it."""
    return sorted(
        n[: -len(".json")]
        for n in names
        if n.endswith(".json")
        and not is_group_file(n)
        and any(n[: -len(".json")] + ext in names for ext in KERNEL_FILES)
    )


def group_for(folder: Path, name: str, names: set[str]) -> dict[str, str]:
    """The group Triton would have written for kernel ``name`` in ``folder``: each of its files, by absolute path."""
    return {n: str(folder / n) for n in sorted(names) if n.startswith(name + ".") and not is_group_file(n)}


def _current(path: Path, names: set[str]) -> bool:
    """Whether Triton finds the kernel through the group file at ``path``: it names files of its own folder, each
    there (Triton's own group files at the path they were written at)."""
    try:
        named = json.loads(path.read_text()).get("child_paths")
    except (OSError, ValueError, AttributeError):
        return False
    return (
        isinstance(named, dict)
        and bool(named)
        and all(isinstance(v, str) and v == str(path.parent / k) and k in names for k, v in named.items())
    )


def _write(path: Path, group: dict[str, str]) -> None:
    """The group file written beside itself and renamed into place: a start reading it sees the old one or the
    new."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"child_paths": group}))
    os.replace(tmp, path)


def write_groups(top: Path) -> int:
    """Under ``top``, every Triton kernel folder gets its group files naming its files where they are now; a group
    file through which Triton finds the kernel already is left as it is. How many were written. A link is never
    followed."""
    written = 0
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        names = set(filenames)
        folder = Path(dirpath)
        for name in kernel_names(names):
            path = folder / f"{GROUP_PREFIX}{name}.json"
            if path.is_symlink() or _current(path, names):
                continue
            _write(path, group_for(folder, name, names))
            written += 1
    return written
