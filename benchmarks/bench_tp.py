"""Bundle bytes at tensor-parallel size 2 against size 1 (CPU, gloo, tiny model by default).

    python benchmarks/bench_tp.py [--model tiny] [--keep DIR]

Warms the model at TP=1 and at TP=2 (two gloo ranks) into fresh cache roots with ``cachetool.warm``, then
packs each hash folder with the bundle API (``cachetool.bundle.packing.pack`` + ``write_ctb``; content-addressed zstd blobs,
identical files stored once) and prints one table:

- ``raw``: the bytes of every file in the cache tree (what a naive tarball would hold before compression);
- ``unique``: the bytes of the distinct file contents (sha256), i.e. what the bundle stores before zstd;
- ``.ctb``: the size of the single-file bundle (manifest + zstd blobs).

Rows: TP=1; TP=2 as the ranks compiled it (``share_ranks=False``: Inductor artifacts are not byte-reproducible,
so two ranks that compiled the same graphs still hold different bytes); TP=2 after the warm's rank sharing
(rank 1's folder made a byte copy of rank 0's, the default of ``cachetool warm --tensor-parallel-size``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")


def tree_bytes(path: Path) -> tuple[int, int, int]:
    """(files, raw bytes, unique bytes) under ``path``."""
    seen: dict[str, int] = {}
    raw = n = 0
    for f in sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink()):
        data = f.read_bytes()
        raw += len(data)
        n += 1
        seen.setdefault(hashlib.sha256(data).hexdigest(), len(data))
    return n, raw, sum(seen.values())


def ctb_bytes(hash_dir: Path, out: Path) -> tuple[int, int]:
    """(.ctb size, blobs) of a bundle of ``hash_dir``."""
    from cachetool.bundle.ctb import write_ctb
    from cachetool.bundle.packing import pack

    with pack(hash_dir) as bundle:
        write_ctb(bundle, out)
        return out.stat().st_size, len(bundle.blobs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--keep", default=None, help="keep the cache roots and bundles in this folder")
    args = ap.parse_args()

    from cachetool import warm
    from compiler.distributed.rank_share import share_rank_folders

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-tp-"))
    work.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, int, int, int, int, int, int, float]] = []
    try:
        t = time.perf_counter()
        r1 = warm(args.model, cache_root=work / "tp1").compile
        s1 = time.perf_counter() - t
        h1 = Path(r1.rank_dir).parent
        rows.append(("TP=1", 1, *tree_bytes(h1), *ctb_bytes(h1, work / "tp1.ctb"), s1))

        t = time.perf_counter()
        r2 = warm(args.model, cache_root=work / "tp2", tensor_parallel_size=2, share_ranks=False).compile
        s2 = time.perf_counter() - t
        h2 = Path(r2.rank_dir).parent
        rows.append(("TP=2, as compiled", 2, *tree_bytes(h2), *ctb_bytes(h2, work / "tp2-raw.ctb"), s2))
        report = share_rank_folders(h2)
        rows.append(("TP=2, ranks shared", 2, *tree_bytes(h2), *ctb_bytes(h2, work / "tp2.ctb"), s2))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    import torch

    print(f"model {args.model}, torch {torch.__version__}, cpu, gloo; rank sharing: {report}")
    head = f"{'variant':<20} {'ranks':>5} {'files':>6} {'raw bytes':>12} {'unique bytes':>13} {'.ctb bytes':>11} {'blobs':>6} {'warm s':>7}"
    print(head)
    print("-" * len(head))
    base = rows[0]
    for name, ranks, files, raw, unique, ctb, blobs, secs in rows:
        print(f"{name:<20} {ranks:>5} {files:>6} {raw:>12,} {unique:>13,} {ctb:>11,} {blobs:>6} {secs:>7.1f}")
    print("-" * len(head))
    for name, _, _, raw, unique, ctb, _, _ in rows[1:]:
        print(
            f"{name:<20} vs TP=1: raw x{raw / base[3]:.2f}, unique x{unique / base[4]:.2f}, .ctb x{ctb / base[5]:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
