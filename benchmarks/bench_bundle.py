"""Pack and install throughput and bundle size against `tar | zstd` of the same tree, in one run.

    python benchmarks/bench_bundle.py [--size-mb 200] [--ranks 4] [--keep DIR]

The synthetic tree mimics a tensor-parallel compile cache: ``--ranks`` rank folders, each with 16 artifacts of
which the 14 middle layers are identical (and identical across ranks), plus per-rank unique edges and a kernel
``.so``. Content is half random bytes (weights-like constants, machine code) and half generated Python-like
text, so it compresses roughly like real Inductor output. Throughput is raw (uncompressed) bytes per second.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _content(rng: random.Random, size: int) -> bytes:
    half = size // 2
    lines = []
    n = 0
    while n < size - half:
        ln = f"    buf{rng.randrange(999)} = torch.ops.aten.mm.default(arg{rng.randrange(64)}_1, permute_{rng.randrange(99)}); del arg{rng.randrange(64)}\n"
        lines.append(ln)
        n += len(ln)
    return rng.randbytes(half) + "".join(lines).encode()[: size - half]


def build_tree(root: Path, size_mb: int, ranks: int) -> tuple[int, int]:
    """Returns (files, raw bytes)."""
    rng = random.Random(0)
    layers = 16
    per_file = (size_mb << 20) // (ranks * (layers + 1))
    middle = _content(rng, per_file)
    files = raw = 0
    for r in range(ranks):
        d = root / "torch_compile_cache" / "bench00000" / f"rank_{r}_0" / "backbone"
        (d / "inductor_cache").mkdir(parents=True)
        (d / "cache_key_factors.json").write_text('{"schema": 1, "hash": "bench00000", "factors": {}}')
        for i in range(layers):
            data = middle if 0 < i < layers - 1 else _content(rng, per_file)
            (d / f"artifact_{i}").write_bytes(data)
            files += 1
            raw += len(data)
        so = _content(rng, per_file)
        (d / "inductor_cache" / "kernel.so").write_bytes(so)
        os.chmod(d / "inductor_cache" / "kernel.so", 0o755)
        files += 2
        raw += len(so)
    return files, raw


REPEAT = 3


def _timed(fn, before=None):
    """Median of REPEAT runs (``before`` resets state untimed before each run)."""
    times = []
    out = None
    for _ in range(REPEAT):
        if before:
            before()
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2], out


def _drop_tree(p: Path) -> None:
    shutil.rmtree(p, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=200)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--level", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; the median is shown")
    ap.add_argument("--keep", type=Path, default=None, help="work folder to keep (default: a temp folder)")
    args = ap.parse_args()
    global REPEAT
    REPEAT = max(1, args.repeat)

    from cachetool.bundle.ctb import open_ctb, write_ctb
    from cachetool.bundle.packing import pack
    from cachetool.bundle.signing import generate_keypair
    from cachetool.install import InstallOptions, install_bundle

    work = Path(args.keep or tempfile.mkdtemp(prefix="bench-bundle-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        src = work / "src"
        _drop_tree(src)
        nfiles, raw = build_tree(src, args.size_mb, args.ranks)
        priv, pub, _ = generate_keypair(work / f"key-{os.getpid()}")

        # cachetool pack (hash, dedupe, compress, sign) + write the .ctb
        ctb = work / "b.ctb"

        def do_pack():
            with pack(src, sign_key=priv, level=args.level) as b:
                write_ctb(b, ctb)
                return b.manifest

        t_pack, manifest = _timed(do_pack)

        # cachetool install (signature + per-blob verification, staging, atomic renames); preflight is off because
        # the synthetic tree has no real factors (preflight costs ~2 s of torch import, independent of size)
        dst = work / "dst"

        def do_install():
            with open_ctb(ctb) as b:
                return install_bundle(b, dst, InstallOptions(trust=[pub], preflight=False))

        t_inst, _ = _timed(do_install, before=lambda: _drop_tree(dst))

        # tar | zstd (same level, all cores), and zstd -d | tar -x
        tz = work / "tree.tar.zst"
        t_tar, _ = _timed(
            lambda: subprocess.run(
                f"tar -C {src} -cf - . | zstd -q -{args.level} -T0 -o {tz} -f", shell=True, check=True
            )
        )
        tzl = work / "tree.long.tar.zst"
        t_tarl, _ = _timed(
            lambda: subprocess.run(
                f"tar -C {src} -cf - . | zstd -q -{args.level} -T0 --long=27 -o {tzl} -f", shell=True, check=True
            )
        )
        untar = work / "untar"

        def fresh_untar():
            _drop_tree(untar)
            untar.mkdir()

        t_untar, _ = _timed(
            lambda: subprocess.run(f"zstd -q -d -c {tz} | tar -C {untar} -xf -", shell=True, check=True),
            before=fresh_untar,
        )

        mb = raw / (1 << 20)
        rows = [
            ("cachetool pack -> .ctb (signed)", t_pack, ctb.stat().st_size, t_inst),
            (f"tar | zstd -{args.level} -T0", t_tar, tz.stat().st_size, t_untar),
            (f"tar | zstd -{args.level} -T0 --long=27", t_tarl, tzl.stat().st_size, None),
        ]
        cpu = platform.processor() or platform.machine()
        print(
            f"median of {REPEAT} runs each; tree: {nfiles} files, {mb:.0f} MiB raw, {manifest.unique_size / (1 << 20):.0f} MiB unique "
            f"({len(manifest.blobs)} blobs); {os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}"
        )
        print()
        print(
            f"| {'method':<36} | {'pack s':>7} | {'pack MiB/s':>10} | {'size MiB':>8} | {'ratio':>6} | "
            f"{'unpack s':>8} | {'unpack MiB/s':>12} |"
        )
        print(f"|{'-' * 38}|{'-' * 9}|{'-' * 12}|{'-' * 10}|{'-' * 8}|{'-' * 10}|{'-' * 14}|")
        for name, t, size, tu in rows:
            un = f"{tu:8.2f} | {mb / tu:12.0f}" if tu else f"{'-':>8} | {'-':>12}"
            print(f"| {name:<36} | {t:7.2f} | {mb / t:10.0f} | {size / (1 << 20):8.1f} | {raw / size:6.1f} | {un} |")
        print()
        print(
            "unpack = `cachetool install` (verify signature and every blob, stage, rename) for the bundle; "
            "`zstd -d | tar -x` for tar"
        )
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
