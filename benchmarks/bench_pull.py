"""The init-container's critical path: ``cachetool pull`` in a cold process vs the plain way of moving the tree.

    python benchmarks/bench_pull.py                                   # CPU: tiny, file + S3 (RGW) + OCI
    python benchmarks/bench_pull.py --model llama-3.2-1b --device cuda --stores file     # on the H200

One run. A warm (``cachetool warm``) fills a root, which is pushed (signed) to each store. Then, each a fresh
process into a fresh cache root, ``--repeat`` times (the median is printed):

- ``cachetool pull REF`` (signature, fingerprint, compiler and env factors checked before any blob);
- ``cachetool pull REF --model M`` (also the cache key the server will need, predicted without a trace);
- the plain way: one ``tar.zst`` of the same root, fetched (a copy from the folder; boto3 from S3) and extracted
  by a small Python process (zstandard + tarfile), with no verification and no preflight.

``wall`` is the process's wall time from start to exit; ``own`` the pull's own reported seconds; ``preflight``
its share spent in the preflight. S3 and OCI need the servers of tests/servers.py (Debian's radosgw and
docker-registry); they are started on 127.0.0.1 and stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PLAIN_FETCH = r"""
import io, os, sys, tarfile, time, zstandard
src, dest = sys.argv[1], sys.argv[2]
if src.startswith("s3://"):
    import boto3
    bucket, key = src[5:].split("/", 1)
    data = boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
else:
    data = open(src, "rb").read()
with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)) as r:
    tarfile.open(fileobj=r, mode="r|").extractall(dest, filter="data")
"""


def cli(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "cachetool", *args], capture_output=True, text=True, env=env, cwd=str(REPO)
    )
    return proc, time.perf_counter() - t0


def must(proc: subprocess.CompletedProcess[str], what: str) -> None:
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"{what} failed (exit {proc.returncode})")


def time_pull(ref: str, work: Path, pub: Path, env: dict[str, str], extra: list[str], repeat: int) -> dict:
    walls, own, pre = [], [], []
    for _i in range(repeat):
        root = work / f"pull-{len(list(work.glob('pull-*')))}"
        proc, wall = cli("pull", ref, "--cache-root", str(root), "--trust", str(pub), "--json", *extra, env=env)
        must(proc, f"pull {ref} {' '.join(extra)}")
        doc = json.loads(proc.stdout)
        walls.append(wall)
        own.append(doc["seconds"])
        pre.append(doc["install"].get("preflight_seconds", 0.0))
        shutil.rmtree(root)
    return {
        "wall": statistics.median(walls),
        "own": statistics.median(own),
        "preflight": statistics.median(pre),
        "bytes": doc["bytes_downloaded"],
        "checked": ", ".join(doc["install"]["preflight"]),
    }


def time_plain(src: str, work: Path, env: dict[str, str], repeat: int) -> dict:
    walls = []
    for _ in range(repeat):
        dest = work / "plain-out"
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", PLAIN_FETCH, src, str(dest)], capture_output=True, text=True, env=env
        )
        walls.append(time.perf_counter() - t0)
        must(proc, f"plain fetch of {src}")
        shutil.rmtree(dest)
    return {
        "wall": statistics.median(walls),
        "own": None,
        "preflight": None,
        "bytes": None,
        "checked": "nothing (no signature, no preflight)",
    }


def tar_zst(root: Path, out: Path) -> int:
    import zstandard

    with (
        open(out, "wb") as f,
        zstandard.ZstdCompressor(level=3).stream_writer(f) as z,
        tarfile.open(fileobj=z, mode="w|") as tar,
    ):
        tar.add(root, arcname=".")
    return out.stat().st_size


def start_servers(stores: list[str], work: Path) -> tuple[dict, list]:
    """{"s3": (ref prefix, env), "oci": (ref prefix, env)} for the stores asked for, and what to stop."""
    from tests.servers import CephRGW, OCIRegistry

    out, running = {}, []
    if "s3" in stores:
        rgw = CephRGW(work / "rgw")
        running.append(rgw)
        rgw.start_cluster()
        bucket = rgw.make_bucket("bench-pull")
        out["s3"] = (f"s3://{bucket}/bench", rgw.env())
    if "oci" in stores:
        reg = OCIRegistry(work / "registry")
        running.append(reg)
        reg.start()
        out["oci"] = (f"oci://{reg.host}/bench", {})
    return out, running


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny")
    p.add_argument("--device", default="cpu")
    p.add_argument("--root", default=None, help="an already warmed cache root (default: warm one now)")
    p.add_argument("--stores", default="file,s3,oci")
    p.add_argument("--compilation-config", default=None, help="for the warm and pull --model (JSON)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", default=None, help="also write the rows to this file")
    args = p.parse_args(argv)
    stores = [s for s in args.stores.split(",") if s]
    base_env = dict(os.environ, TORCHINDUCTOR_VEC_ISA_OK="1")
    with tempfile.TemporaryDirectory(prefix="bench_pull_") as tmp:
        work = Path(tmp)
        root = Path(args.root) if args.root else work / "warm-root"
        cc = ["--compilation-config", args.compilation_config] if args.compilation_config else []
        if not args.root:
            proc, wall = cli(
                "warm", "--model", args.model, "--device", args.device, "--cache-root", str(root), *cc, env=base_env
            )
            must(proc, "warm")
            print(f"  warmed {args.model} on {args.device} in {wall:.1f} s", flush=True)
        key = work / "k.key"
        must(cli("keygen", "-o", str(key))[0], "keygen")
        pub = Path(str(key) + ".pub")
        tarball = work / "cache.tar.zst"
        size = tar_zst(root, tarball)
        servers, running = start_servers(stores, work)
        rows = []
        try:
            for store in stores:
                if store == "file":
                    prefix, env = f"file://{work / 'store'}", {}
                else:
                    prefix, env = servers[store]
                env = {**base_env, **env}
                ref = f"{prefix}/{args.model}:bench"
                must(cli("push", str(root), ref, "--sign-key", str(key), env=env)[0], f"push to {store}")
                dev = ["--device", args.device]
                rows.append((store, "cachetool pull", time_pull(ref, work, pub, env, dev, args.repeat)))
                rows.append(
                    (
                        store,
                        "cachetool pull --model",
                        time_pull(ref, work, pub, env, [*dev, "--model", args.model, *cc], args.repeat),
                    )
                )
                if store == "file":
                    rows.append(
                        (store, "plain: copy + tar.zst extract", time_plain(str(tarball), work, env, args.repeat))
                    )
                elif store == "s3":
                    import boto3

                    bucket = prefix[5:].split("/", 1)[0]
                    boto3.client(
                        "s3",
                        endpoint_url=env["AWS_ENDPOINT_URL"],
                        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                        region_name=env["AWS_DEFAULT_REGION"],
                    ).upload_file(str(tarball), bucket, "plain/cache.tar.zst")
                    rows.append(
                        (
                            store,
                            "plain: boto3 get + extract",
                            time_plain(f"s3://{bucket}/plain/cache.tar.zst", work, env, args.repeat),
                        )
                    )
                print(f"  {store}: done", flush=True)
        finally:
            for server in running:
                server.stop_all()
    print(
        f"model {args.model} ({args.device}) · tree {sum(1 for _ in root.rglob('*')) if args.root else '-'} "
        f"entries, tar.zst {size / 1e6:.2f} MB · {os.cpu_count()} CPUs · median of {args.repeat} cold processes"
    )
    header = f"{'store':<6} {'method':<32} {'wall s':>7} {'own s':>7} {'preflight s':>11} {'bytes':>10}  checked"
    print(header)
    print("-" * len(header))
    for store, method, r in rows:
        fmt = lambda v, spec: format(v, spec) if v is not None else "-"  # noqa: E731
        print(
            f"{store:<6} {method:<32} {r['wall']:>7.2f} {fmt(r['own'], '>7.2f'):>7} "
            f"{fmt(r['preflight'], '>11.3f'):>11} {fmt(r['bytes'], '>10d'):>10}  {r['checked']}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps([{"store": s, "method": m, **r} for s, m, r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
