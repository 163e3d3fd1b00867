"""Push and pull a ~1 GiB synthetic cache tree through Ceph RGW: cachetool vs the plain way.

The plain way is what teams do without a tool: one ``tar.zst`` of the cache root uploaded with boto3
(multipart, parallel), then downloaded, decompressed and extracted on the other side.

cachetool: ``pack`` (hash, dedupe, zstd per unique file, sign) + ``push`` (HEAD each blob, upload the missing ones
in parallel, manifest, signature, ref), then ``pull`` (ref, manifest, signature verify, preflight, parallel blob
downloads, per-blob verification, atomic install). Also timed: a re-push of the unchanged tree and a re-push after
one artifact changed (what CI does on every merge), against re-uploading the whole tar.

The synthetic tree mirrors the measured shape of a real cache (docs/stores.md): 2 tensor-parallel ranks x 16 layer
artifacts; the 14 middle layers are identical and the same on both ranks (a real Llama-3.2-1B cache: 31.3 MB, 6.45 MB
unique); each artifact is half random bytes, half repetitive code-like text (zstd ~2x). Run::

    python benchmarks/bench_stores.py [--size-mib 1024] [--endpoint-url URL --bucket B]  # default: starts RGW
    python benchmarks/bench_stores.py --oci-files 100000 --size-mib 32   # OCI packs through docker-registry

Starting RGW needs the Debian ceph packages (see tests/servers.py). One run; it takes a few minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def make_tree(root: Path, size_mib: int) -> int:
    from tests.cache_trees import local_factors

    factors = local_factors()
    per = max(1, size_mib // 32) * (1 << 20)  # 2 ranks x 16 artifacts = 32 files of `per` bytes
    rng = os.urandom

    def content(seed: str) -> bytes:
        text = (
            f"def kernel_{seed}(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):\n    x = tl.load(in_ptr0)\n".encode()
            * (per // 2 // 80 + 1)
        )[: per // 2]
        return rng(per - len(text)) + text

    middle = content("middle")
    total = 0
    for r in ("rank_0_0", "rank_1_0"):
        d = root / "torch_compile_cache" / factors["hash"] / r / "backbone"
        d.mkdir(parents=True)
        (d / "cache_key_factors.json").write_text(json.dumps(factors, indent=2, sort_keys=True))
        (d / "computation_graph.py").write_text("def forward(self, x):\n    return x\n")
        (d / "transformed_code.py").write_text("# transformed\n")
        index = {}
        for i in range(16):
            data = middle if 0 < i < 15 else content(f"edge{i}{r}")
            (d / f"artifact_{i}").write_bytes(data)
            total += len(data)
            index[str(i)] = {"graph_hash": f"g{i}", "shape": "general", "artifact": f"artifact_{i}"}
        (d / "compile_index.json").write_text(json.dumps(index, sort_keys=True))
    return total


def plain_push_pull(tree: Path, work: Path, s3, bucket: str, key: str) -> dict:
    import zstandard
    from boto3.s3.transfer import TransferConfig

    cfg = TransferConfig(multipart_threshold=32 << 20, multipart_chunksize=16 << 20, max_concurrency=8)
    out = {}
    t0 = time.monotonic()
    tzst = work / "cache.tar.zst"
    with open(tzst, "wb") as f:
        with zstandard.ZstdCompressor(level=3, threads=-1).stream_writer(f) as zf:
            with tarfile.open(fileobj=zf, mode="w|") as tf:
                tf.add(tree, arcname=".")
    out["pack_s"] = time.monotonic() - t0
    t1 = time.monotonic()
    s3.upload_file(str(tzst), bucket, key, Config=cfg)
    out["push_s"] = time.monotonic() - t1
    out["up_bytes"] = tzst.stat().st_size
    # unchanged / one-file-changed re-push: the whole archive again
    t2 = time.monotonic()
    s3.upload_file(str(tzst), bucket, key, Config=cfg)
    out["repush_s"] = time.monotonic() - t2
    out["repush_bytes"] = out["up_bytes"]
    tzst.unlink()
    t3 = time.monotonic()
    dl = work / "dl.tar.zst"
    s3.download_file(bucket, key, str(dl), Config=cfg)
    dest = work / "plain-root"
    dest.mkdir()
    with open(dl, "rb") as f:
        with zstandard.ZstdDecompressor().stream_reader(f) as zr:
            with tarfile.open(fileobj=zr, mode="r|") as tf:
                tf.extractall(dest, filter="data")
    out["pull_s"] = time.monotonic() - t3
    out["down_bytes"] = dl.stat().st_size
    dl.unlink()
    shutil.rmtree(dest)
    return out


def cachetool_push_pull(tree: Path, work: Path, ref: str, key_path: Path, pub: Path) -> dict:
    from cachetool.api import pull
    from cachetool.bundle.packing import pack
    from cachetool.stores import open_store
    from cachetool.transfer.push import push

    out = {}
    t0 = time.monotonic()
    b = pack(tree, sign_key=key_path)
    out["pack_s"] = time.monotonic() - t0
    out["unique_blobs"] = len(b.blobs)
    from cachetool.stores.addresses import parse_ref

    st = open_store(parse_ref(ref).store)
    t1 = time.monotonic()
    r = push(b, ref, store=st, progress=False)
    out["push_s"] = time.monotonic() - t1
    out["up_bytes"] = r.bytes_uploaded
    t2 = time.monotonic()
    r2 = push(b, ref, store=st, progress=False)
    out["repush_s"] = time.monotonic() - t2
    out["repush_bytes"] = r2.bytes_uploaded
    b.close()

    # one artifact changed (an edge layer recompiled): pack + push again
    edge = next(tree.glob("torch_compile_cache/*/rank_0_0/backbone/artifact_0"))
    data = bytearray(edge.read_bytes())
    data[:4096] = os.urandom(4096)
    edge.write_bytes(bytes(data))
    t3 = time.monotonic()
    with pack(tree, sign_key=key_path) as b3:
        r3 = push(b3, ref, store=st, progress=False)
    out["change1_s"] = time.monotonic() - t3
    out["change1_bytes"] = r3.bytes_uploaded
    out["change1_blobs"] = r3.blobs_uploaded

    dest = work / "ct-root"
    st.counters.bytes_down = 0
    t4 = time.monotonic()
    p = pull(ref, dest, trust=[pub], store=st, progress=False)
    out["pull_s"] = time.monotonic() - t4
    out["down_bytes"] = p.bytes_downloaded
    out["installed_bytes"] = p.install.bytes
    shutil.rmtree(dest)
    return out


def add_small_files(tree: Path, n: int) -> None:
    """``n`` small files (Triton/Inductor cache entries, ~200 bytes each) in rank 0's Inductor cache."""
    rank = next(tree.glob("torch_compile_cache/*/rank_0_0/backbone"))
    for i in range(n):
        f = rank / "inductor_cache" / f"k{i // 1000:03d}" / f"kernel_{i}.json"
        if i % 1000 == 0:
            f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps({"kernel": i, "grid": [i % 7, 1, 1], "num_warps": 4, "shared": i % 4096}))


def oci_packs(work: Path, n_files: int, size_mib: int) -> dict:
    """A bundle of ``n_files`` small files plus the artifacts through docker-registry (packs): push, re-push,
    one artifact changed, one small file changed, pull."""
    from cachetool.bundle.signing import generate_keypair
    from tests.servers import OCIRegistry

    reg = OCIRegistry(work / "registry")
    (work / "registry").mkdir()
    reg.start()
    try:
        tree = work / "tree"
        make_tree(tree, size_mib)
        add_small_files(tree, n_files)
        priv, pub, _ = generate_keypair(work / "signer")
        out = cachetool_push_pull(tree, work, f"{reg.url}/ct/llama:bench", priv, pub)
        from cachetool.bundle.packing import pack
        from cachetool.transfer.push import push

        f = next(tree.glob("torch_compile_cache/*/rank_0_0/backbone/inductor_cache/k000/kernel_7.json"))
        f.write_text("changed")
        with pack(tree, sign_key=priv) as b:
            r = push(b, f"{reg.url}/ct/llama:bench", progress=False)
            out["small1_bytes"] = r.bytes_uploaded
            out["small1_blobs"] = r.blobs_uploaded
            out["manifest_and_signature_bytes"] = len(b.manifest_bytes()) + len(b.signature_bytes() or b"")
        out["files"] = n_files
        return out
    finally:
        reg.stop_all()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--endpoint-url", default=None, help="Use this S3 server instead of starting Ceph RGW.")
    ap.add_argument("--bucket", default=None)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--oci-files",
        type=int,
        default=0,
        metavar="N",
        help="Instead: N small files + the artifacts through docker-registry (OCI packs); prints the "
        "re-push and changed-artifact byte counts.",
    )
    args = ap.parse_args()
    if args.oci_files:
        work = Path(tempfile.mkdtemp(prefix="ct-bench-oci-"))
        try:
            o = oci_packs(work, args.oci_files, args.size_mib)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        if args.json:
            print(json.dumps(o, indent=2))
            return 0
        print(
            f"OCI (docker-registry on 127.0.0.1), {o['files']} small files + artifacts, {o['unique_blobs']} unique blobs"
        )
        for k in (
            "pack_s",
            "push_s",
            "up_bytes",
            "repush_s",
            "repush_bytes",
            "change1_s",
            "change1_bytes",
            "change1_blobs",
            "small1_bytes",
            "small1_blobs",
            "manifest_and_signature_bytes",
            "pull_s",
            "down_bytes",
        ):
            print(f"  {k:30} {o[k]:.2f}" if isinstance(o[k], float) else f"  {k:30} {o[k]}")
        return 0

    from cachetool.bundle.signing import generate_keypair

    work = Path(tempfile.mkdtemp(prefix="ct-bench-"))
    rgw = None
    try:
        if args.endpoint_url:
            import boto3

            s3 = boto3.client("s3", endpoint_url=args.endpoint_url)
            bucket = args.bucket or "cachetool-bench"
        else:
            from tests.servers import CephRGW

            rgw = CephRGW(work / "rgw")
            (work / "rgw").mkdir()
            t = time.monotonic()
            rgw.start_cluster()
            print(f"RGW up in {time.monotonic() - t:.1f}s at {rgw.endpoint}", file=sys.stderr)
            os.environ.update(rgw.env())
            s3 = rgw.client()
            bucket = rgw.make_bucket("cachetool-bench")
            s3.put_object(Bucket=bucket, Key="warm", Body=b"x")
        tree = work / "tree"
        raw = make_tree(tree, args.size_mib)
        priv, pub, _ = generate_keypair(work / "signer")
        print(f"synthetic tree: {raw / (1 << 20):.0f} MiB in {tree}", file=sys.stderr)

        plain = plain_push_pull(tree, work, s3, bucket, "plain/cache.tar.zst")
        ours = cachetool_push_pull(tree, work, f"s3://{bucket}/ct/llama:bench", priv, pub)
        result = {"raw_bytes": raw, "plain": plain, "cachetool": ours}
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            mib = lambda n: f"{n / (1 << 20):.1f} MiB"  # noqa: E731
            rows = [
                ("pack (tar+zstd / hash+dedupe+zstd+sign)", f"{plain['pack_s']:.1f} s", f"{ours['pack_s']:.1f} s"),
                ("push: time", f"{plain['push_s']:.1f} s", f"{ours['push_s']:.1f} s"),
                ("push: bytes sent", mib(plain["up_bytes"]), mib(ours["up_bytes"])),
                ("re-push unchanged: time", f"{plain['repush_s']:.1f} s", f"{ours['repush_s']:.2f} s"),
                ("re-push unchanged: bytes sent", mib(plain["repush_bytes"]), mib(ours["repush_bytes"])),
                (
                    "re-push, 1 artifact changed: time (incl. pack)",
                    f"{plain['pack_s'] + plain['repush_s']:.1f} s",
                    f"{ours['change1_s']:.1f} s",
                ),
                (
                    "re-push, 1 artifact changed: bytes sent",
                    mib(plain["repush_bytes"]),
                    f"{mib(ours['change1_bytes'])} ({ours['change1_blobs']} blob)",
                ),
                ("pull + install: time", f"{plain['pull_s']:.1f} s", f"{ours['pull_s']:.1f} s"),
                ("pull: bytes received", mib(plain["down_bytes"]), mib(ours["down_bytes"])),
            ]
            w = max(len(r[0]) for r in rows)
            print(f"raw tree {mib(raw)}, {ours['unique_blobs']} unique blobs; RGW on 127.0.0.1, memstore OSD")
            print(f"{'':{w}}  {'plain tar.zst':>16}  {'cachetool':>22}")
            for name, a, b in rows:
                print(f"{name:{w}}  {a:>16}  {b:>22}")
        return 0
    finally:
        if rgw is not None:
            rgw.stop_all()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
