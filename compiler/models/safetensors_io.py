"""Minimal ``.safetensors`` reader/writer (uses the ``safetensors`` package when installed).

The format is an 8-byte little-endian header length, a JSON header (name → dtype, shape, data_offsets)
and the raw little-endian data; a dependency-free reader keeps the CPU path installable without it.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

import torch

_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
           "BOOL": torch.bool}
_NAMES = {v: k for k, v in _DTYPES.items()}


def iter_safetensors(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    try:
        from safetensors.torch import safe_open  # type: ignore[import-not-found]
    except ImportError:
        safe_open = None
    if safe_open is not None:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)
        return
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        buf = bytearray(data[base + start : base + end])
        t = torch.frombuffer(buf, dtype=_DTYPES[info["dtype"]]) if buf else torch.empty(0, dtype=_DTYPES[info["dtype"]])
        yield name, t.reshape(info["shape"])


def save_safetensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    header: dict[str, object] = {}
    blobs: list[bytes] = []
    offset = 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))
