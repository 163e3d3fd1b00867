"""Every Triton compile of this process (and of Inductor's compile workers, which inherit the environment) as one
JSON line in ``$DIAG_LOG``: the kernel's name, Triton's cache hash, hit or miss, and the parts of Triton's cache key
(source hash, the JIT function's key, constants, attrs, options and environment) and the folders its files were read
from, so that a start that builds can be matched against the warm's compile of the same kernel (``compare.py``). Triton calls
``knobs.compilation.listener`` on every ``triton.compile``, hit or miss. It runs the ``sitecustomize`` it shadows
first (the torch engine's site folder, where that comes after it on ``PYTHONPATH``)."""

import importlib.machinery
import importlib.util
import json
import os
import sys


def _chain_shadowed() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    entries = [os.path.abspath(p or os.getcwd()) for p in sys.path]
    after = sys.path[entries.index(here) + 1 :] if here in entries else []
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", after)
    if spec and spec.loader and os.path.dirname(os.path.abspath(spec.origin or "")) != here:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


def _plain(value):
    return value if isinstance(value, (int, float, str, bool, type(None))) else str(value)[:200]


def _listener(src=None, metadata=None, metadata_group=None, times=None, cache_hit=None, **_) -> None:
    try:
        md = dict(metadata or {})
        record = {
            "pid": os.getpid(),
            "name": getattr(src, "name", "?"),
            "hit": cache_hit,
            "hash": md.get("hash"),
            "src_hash": src.hash() if hasattr(src, "hash") else None,
            "fn_key": getattr(getattr(src, "fn", None), "cache_key", None),
            "constants": str(sorted((str(k), str(v)) for k, v in getattr(src, "constants", {}).items()))[:400],
            "attrs": str(getattr(src, "attrs", ""))[:300],
            "options": {k: _plain(v) for k, v in md.items() if k != "hash"},
            # Triton's group file names its files by absolute path: a hit may read them from another root
            "read_from": sorted({os.path.dirname(p) for p in (metadata_group or {}).values()})[:3],
            "cache_dir": os.environ.get("TRITON_CACHE_DIR"),
        }
    except Exception as exc:  # noqa: BLE001 - a diagnosis: say what failed and go on
        record = {"error": repr(exc)}
    with open(os.environ["DIAG_LOG"], "a") as f:
        f.write(json.dumps(record, default=str) + "\n")


_chain_shadowed()
if os.environ.get("DIAG_LOG"):
    try:
        from triton import knobs

        knobs.compilation.listener = _listener
    except ImportError as exc:
        print(f"triton_misses: no Triton listener: {exc}", file=sys.stderr)
