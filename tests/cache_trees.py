"""Cache trees built from the documented layouts, a crafter of hostile .ctb files, and a test's isolation from the
machine's trust and store settings: shared by the bundle, install, store, transfer, engine and deploy tests."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import stat
import tarfile
import time
from pathlib import Path

from cachetool.bundle.manifest import MEDIA_TYPE, canonical_json
from cachetool.bundle.signing import pae

HASH10 = "3f9a1c2b7d"


def _w(path: Path, data: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.chmod(path, mode)


def local_factors(*, evidence: bool = False, **overrides) -> dict:
    """cache_key_factors.json content with this machine's env/compiler factors (from compiler.cache_key when
    importable, else a hand-built stand-in in the documented format). ``evidence``: also this machine's build
    evidence beside the compiler factor, as a warm writes it (overridable as ``evidence.<field>``)."""
    try:
        from compiler import cache_key as ck

        env, comp, fh = ck.local_env_factors(), ck.local_compiler_factors("cpu"), ck.factor_hash
    except ImportError:  # pragma: no cover - compiler not there yet
        import importlib.metadata
        import platform

        env = {"python": "3.11"}
        comp = {
            "torch": importlib.metadata.version("torch"),
            "device_type": "cpu",
            "device": f"cpu-{platform.machine()}",
        }

        def fh(v):
            return hashlib.sha256(json.dumps(v, sort_keys=True).encode()).hexdigest()

    config = {
        "compilation_config": {
            "mode": 3,
            "cudagraph_mode": "NONE",
            "compile_sizes": [1, 8],
            "splitting_ops": ["cachetool.attention"],
        },
        "model_config": {"hidden_size": 64, "num_hidden_layers": 16},
    }
    code = {"compiler/models/llama.py": "a" * 64, "torch/nn/modules/linear.py": "b" * 64}
    values = {"env": env, "config": config, "code": code, "compiler": comp}
    extra = {}
    if evidence:
        from compiler import build_identity

        extra = build_identity.evidence()
    for path in list(overrides):
        if path.startswith("evidence."):
            extra[path.partition(".")[2]] = overrides.pop(path)
    for path, v in overrides.items():  # "compiler.torch_key" -> value
        name, _, field = path.partition(".")
        d = values[name]
        *parents, last = [field] if name == "code" else field.split(".")
        for p in parents:
            d = d[p]
        d[last] = v
    factors = {n: {"hash": fh(v), "values": v} for n, v in values.items()}
    if extra:
        factors["compiler"]["evidence"] = extra
    h = hashlib.sha256("".join(factors[n]["hash"] for n in ("env", "config", "code", "compiler")).encode()).hexdigest()
    return {"schema": 1, "hash": h[:10], "factors": factors}


def make_native_tree(
    root: Path,
    *,
    ranks=("rank_0_0", "rank_1_0"),
    layers: int = 16,
    factors: dict | None = None,
    save_format: str = "binary",
) -> Path:
    """``{root}/torch_compile_cache/{hash10}/rank_{r}_{dp}/backbone/`` as compiler/ writes it. The middle
    layers' artifacts are identical (stored once), and so is everything across ranks except the index."""
    factors = factors or local_factors()
    h = factors["hash"]
    middle = b"MIDDLE-LAYER-ARTIFACT" * 2000
    config = factors.get("factors", {}).get("config", {}).get("values", {}).get("compilation_config", {})
    sizes = config.get("compile_sizes", [])
    for r in ranks:
        d = root / "torch_compile_cache" / h / r / "backbone"
        _w(d / "cache_key_factors.json", json.dumps(factors, indent=2, sort_keys=True).encode())
        _w(d / "computation_graph.py", b"def forward(self, x):\n    return x\n")
        _w(d / "transformed_code.py", b"# transformed\n")
        index = {}
        for i in range(layers):
            name = f"artifact_{i}"
            content = middle if 0 < i < layers - 1 else f"edge-{i}-{r}".encode() * 500
            if save_format == "unpacked":
                _w(d / name / "graph.py", content)
                _w(d / name / "meta.json", b"{}")
            else:
                _w(d / name, content)
            index[str(i)] = {"graph_hash": "g" + str(i), "shape": "general", "artifact": name, "format": save_format}
            for size in sizes:
                # a compile size's piece: its own graph hash; the fixture reuses the general artifact file
                index[f"{i}@{size}"] = {
                    "graph_hash": f"g{i}@{size}",
                    "shape": size,
                    "artifact": name,
                    "format": save_format,
                }
        # compiler/artifacts.py's format: a warm that completed names every piece at every compile size
        _w(
            d / "compile_index.json",
            json.dumps({"schema": 1, "cache_key": h, "pieces": index}, sort_keys=True).encode(),
        )
        _w(d / "inductor_cache" / "ab" / "cabcdef.so", b"\x7fELF" + b"\0" * 3000, 0o755)
        _w(d / "inductor_cache" / "ab" / "cabcdef.cpp", b"// kernel\n" * 50)
        (d / "triton_cache").mkdir(parents=True, exist_ok=True)  # empty folder: kept by pack/install
    return root


def make_vllm_tree(root: Path) -> Path:
    """A real vLLM cache root: piecewise tree (binary and unpacked artifacts, vllm_compile_cache.py, legacy
    inductor/triton caches) and the AOT tree."""
    h = "0a1b2c3d4e"
    vfactors = {
        "env": {"VLLM_USE_V1": "1"},
        "config_hash": "c" * 10,
        "code_hash": "d" * 64,
        "compiler_hash": "e" * 64,
        "torch_version": "2.13.0+cpu",
    }
    subgraph = b"SUBGRAPH" * 4000
    for r in ("rank_0_0", "rank_1_0"):
        d = root / "torch_compile_cache" / h / r / "backbone"
        _w(d / "cache_key_factors.json", json.dumps(vfactors).encode())
        _w(d / "vllm_compile_cache.py", b"{(1, 8192, 0): 'artifact_compile_range_1_8192_subgraph_0'}\n")
        _w(d / "computation_graph.py", b"class GraphModule(torch.nn.Module): ...\n")
        _w(d / "transformed_code.py", b"def forward(...): ...\n")
        for i in range(6):
            _w(d / f"artifact_compile_range_1_8192_subgraph_{i}", subgraph if 0 < i < 5 else f"edge{i}".encode() * 99)
        _w(d / "artifact_compile_range_16_16_subgraph_0" / "fxgraph" / "graph.pt", b"unpacked" * 300)
        _w(d / "inductor_cache" / "fxgraph" / "xy" / "fxyz", b"fx" * 1000)
        _w(d / "triton_cache" / "KHASH" / "kernel.json", b'{"name": "k"}')
    a = root / "torch_compile_cache" / "torch_aot_compile" / "9f8e7d6c5b" / "rank_0_0"
    _w(a / "model", b"AOTMODEL" * 5000)
    _w(a / "inductor_cache" / "aa" / "caa.so", b"\x7fELF" + b"\1" * 4000, 0o755)
    return root


AOT = "torch_compile_cache/torch_aot_compile/" + "ab" * 32


def make_aot_tree(root: Path, ranks=("rank_0_0", "rank_1_0")) -> Path:
    """vLLM's AOT tree as vLLM 0.32 writes it with -tp 2: one key folder, a shared inductor_cache/ beside the
    rank folders, and the model-inspection cache at the root."""
    for r in ranks:
        _w(root / AOT / r / "model", f"AOT-{r}".encode() * 500)
    _w(root / AOT / "inductor_cache" / "ab" / "cab.so", b"\x7fELF" + b"\0" * 2000, 0o755)
    _w(root / AOT / "inductor_cache" / "aotautograd" / "x" / "entry", b"entry" * 100)
    _w(root / "modelinfos" / "vllm-model_executor-models-llama-LlamaForCausalLM.json", b'{"hash": "h"}')
    return root


def make_triton_tree(root: Path) -> Path:
    """A Triton cache folder: one folder per kernel hash, metadata with target cuda sm90."""
    for i, name in enumerate(("ZQW3ABCD", "P4LMNOPQ", "X7RSTUVW")):
        d = root / name
        meta = {
            "name": f"triton_poi_fused_{i}",
            "target": {"backend": "cuda", "arch": 90, "warp_size": 32},
            "num_warps": 4,
        }
        _w(d / f"triton_poi_fused_{i}.json", json.dumps(meta).encode())
        _w(d / f"triton_poi_fused_{i}.ttir", b"module {}\n" * 100)
        _w(d / f"triton_poi_fused_{i}.ptx", b".version 8.4\n" * 200)
        _w(d / f"triton_poi_fused_{i}.cubin", b"CUBIN" * 1000 if i else b"SHARED-CUBIN" * 800)
        # as Triton writes it: the kernel's files by absolute path
        group = {f"triton_poi_fused_{i}{ext}": str(d / f"triton_poi_fused_{i}{ext}") for ext in (".json", ".ttir")}
        _w(d / f"__grp__triton_poi_fused_{i}.json", json.dumps({"child_paths": group}).encode())
    _w(root / "X7RSTUVW" / "copy.cubin", b"SHARED-CUBIN" * 800)
    _w(root / "X7RSTUVW" / "launcher.so", b"\x7fELF" + b"\2" * 2000, 0o755)
    _w(root / "X7RSTUVW" / "readonly.source", b"src", 0o444)
    return root


def packable_tree(root, n: int):
    """A native tree with ``n`` small files more in rank 0's Inductor cache, and a large artifact."""
    make_native_tree(root, ranks=("rank_0_0",), layers=2)
    rank = next(root.glob("torch_compile_cache/*/rank_0_0/backbone"))
    for i in range(n):
        f = rank / "inductor_cache" / f"k{i // 500}" / f"kernel_{i}.json"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps({"i": i}))
    (rank / "inductor_cache" / "big.so").write_bytes(os.urandom(600_000))
    return root, rank


def tree_snapshot(root: Path) -> dict:
    """{relative path: ("f", mode, sha256) | ("d", mode)} for comparing trees byte for byte with modes."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            p = Path(dirpath) / d
            out[str(p.relative_to(root))] = ("d", stat.S_IMODE(os.lstat(p).st_mode))
        for f in filenames:
            p = Path(dirpath) / f
            st = os.lstat(p)
            assert stat.S_ISREG(st.st_mode), p
            out[str(p.relative_to(root))] = ("f", stat.S_IMODE(st.st_mode), hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def aged(root: Path, seconds: float = 3600) -> Path:
    """Every file and folder of ``root`` as written ``seconds`` ago: older than any start of the test (a vLLM start's
    mark counts what was written up to 2 s before it as its own, ``unfinished.SLACK_NS``)."""
    then = time.time() - seconds
    for p in [root, *root.rglob("*")]:
        os.utime(p, (then, then), follow_symlinks=False)
    return root


def dir_is_empty_or_absent(p: Path) -> bool:
    return not p.exists() or not any(p.iterdir())


# ------------------------------------------------------------------------------------------------------------
# hostile bundles


def sign_bytes(manifest_bytes: bytes, private_key) -> bytes:
    from cachetool.bundle.signing import key_id

    sig = private_key.sign(pae(MEDIA_TYPE, manifest_bytes))
    return canonical_json(
        {
            "payload": base64.b64encode(manifest_bytes).decode(),
            "payloadType": MEDIA_TYPE,
            "signatures": [{"keyid": key_id(private_key.public_key()), "sig": base64.b64encode(sig).decode()}],
        }
    )


def zst(data: bytes, content_size: bool = True) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=3, write_content_size=content_size).compress(data)


def blob_entry(content: bytes, stored: bytes | None = None, size: int | None = None) -> tuple[dict, bytes]:
    stored = zst(content) if stored is None else stored
    return (
        {
            "digest": "sha256:" + hashlib.sha256(content).hexdigest(),
            "size": len(content) if size is None else size,
            "stored_digest": "sha256:" + hashlib.sha256(stored).hexdigest(),
            "stored_size": len(stored),
        },
        stored,
    )


def complete_unit_files(unit: str = "torch_compile_cache/h/rank_0_0") -> list[tuple[str, bytes]]:
    """The files of the smallest native unit that is a complete cache (an install refuses an incomplete one): a
    prefix folder with a key, an index naming one piece, and that piece's artifact."""
    factors = {
        "schema": 1,
        "hash": "h",
        "factors": {"config": {"hash": "c", "values": {"compilation_config": {"compile_sizes": []}}}},
    }
    index = {
        "schema": 1,
        "cache_key": "h",
        "pieces": {"0": {"graph_hash": "g0", "shape": "general", "artifact": "artifact_0", "format": "binary"}},
    }
    return [
        (f"{unit}/backbone/cache_key_factors.json", json.dumps(factors).encode()),
        (f"{unit}/backbone/compile_index.json", json.dumps(index).encode()),
        (f"{unit}/backbone/artifact_0", b"artifact"),
    ]


def manifest_obj(
    files: list[tuple[str, bytes]],
    *,
    unit: str = "torch_compile_cache/h/rank_0_0",
    fingerprint: dict | None = None,
    **over,
) -> tuple[dict, dict[str, bytes]]:
    """A valid (but hand-made) manifest for ``files`` and its stored blobs keyed by content hex."""
    blobs, stored, entries = {}, {}, []
    for path, content in files:
        b, s = blob_entry(content)
        blobs[b["digest"]] = b
        stored[b["digest"][7:]] = s
        entries.append({"path": path, "mode": 0o644, "size": len(content), "digest": b["digest"]})
    obj = {
        "schema": 1,
        "media_type": MEDIA_TYPE,
        "tool": {"name": "cachetool", "version": "0.1.0"},
        "layout": "native",
        "save_format": None,
        "keys": [],
        "fingerprint": fingerprint or {},
        "ranks": ["rank_0_0"],
        "units": [{"path": unit, "key": "h", "rank": "rank_0_0"}],
        "dirs": [],
        "files": sorted(entries, key=lambda e: e["path"]),
        "blobs": sorted(blobs.values(), key=lambda b: b["digest"]),
    }
    obj.update(over)
    return obj, stored


def write_raw_ctb(
    path: Path,
    manifest_bytes: bytes,
    signature: bytes | None,
    blobs: dict[str, bytes],
    extra: list[tarfile.TarInfo] = (),
) -> Path:
    with tarfile.open(path, "w:", format=tarfile.USTAR_FORMAT) as tf:

        def add(name, data):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))

        add("manifest.json", manifest_bytes)
        if signature is not None:
            add("signature.dsse.json", signature)
        for hexd, data in blobs.items():
            add(f"blobs/sha256/{hexd}.zst", data)
        for ti in extra:
            tf.addfile(ti, io.BytesIO(b"x" * ti.size) if ti.isreg() else None)
    return path


# A fingerprint as an H200 would report it: another platform for multi-platform tags and "no bundle fits" cases.
CUDA_FP = {
    "os": "linux",
    "arch": "x86_64",
    "device": "cuda",
    "torch": "2.11.0+cu130",
    "cuda": "13.0",
    "triton": "3.6.0",
    "gpu": "NVIDIA H200",
    "capability": "sm90",
}


def isolate_environment(monkeypatch, tmp_path, store_attempts: int) -> None:
    """No pinned keys or docker configuration of the machine running the tests leaks in; a dead store fails after
    ``store_attempts`` attempts."""
    monkeypatch.delenv("CACHETOOL_TRUSTED_KEYS", raising=False)
    monkeypatch.setenv("CACHETOOL_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.setenv("CACHETOOL_STORE_MAX_ATTEMPTS", str(store_attempts))
