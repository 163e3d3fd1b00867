"""A vLLM cache root must be writable: vLLM writes under it at every start, a hit too.

vLLM 0.26 on a hit makes its AOT folder's ``inductor_cache/`` and unpacks the kernels of the artifact it loads into
it (Inductor's binary artifacts are unpacked into ``TORCHINDUCTOR_CACHE_DIR``, which vLLM points there), and
FlashInfer takes lock files in its workspace; on a read-only mount (a read-only PVC, a Kubernetes image volume) the
load fails ("Compiling model again due to a load failure from ...torch_aot_compile/...") and the compile that
follows dies with ``OSError: [Errno 30] Read-only file system``. ``check`` says so in one line before it starts
vLLM (:func:`require_writable_for_vllm`), with the fix: a writable root, or a writable copy of it. The native
engine's hot start reads its root only, and works on a read-only one (docs/deploy.md, "Read-only cache roots")."""

from __future__ import annotations

from pathlib import Path

from cachetool.cache_root import CacheRoot
from cachetool.writable_root import require_writable

WHY = (
    "vLLM writes under its cache root at every start, a hit too (it unpacks the kernels of the AOT artifact it "
    "loads into torch_compile_cache/torch_aot_compile/KEY/inductor_cache/ and dies with 'Read-only file system' "
    "there)"
)


def require_writable_for_vllm(root: CacheRoot, verb: str) -> Path:
    """``root``'s path when vLLM can write there; else :class:`UnwritableRootError` (exit 2) in one line: the root,
    why vLLM needs it writable, and the fix (a full file system stays :class:`DiskFullError`, exit 9)."""
    return require_writable(root, verb, needed_by=WHY)
