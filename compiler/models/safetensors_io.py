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

_DTYPES = {
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F64": torch.float64,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
_NAMES = {v: k for k, v in _DTYPES.items()}


_ITEMSIZE = {
    **{name: torch.empty(0, dtype=dt).element_size() for name, dt in _DTYPES.items()},
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "U16": 2,
    "U32": 4,
    "U64": 8,
}  # readable by the safetensors package
_MAX_HEADER = 100 * 1024 * 1024


def check_safetensors(path: Path) -> tuple[dict[str, dict], int]:
    """Read and check the header of a ``.safetensors`` file without reading its data: JSON object, known dtypes,
    offsets inside the file that match each shape. Returns ``(header, data start)``; raises ``ValueError`` with
    a one-line reason for a corrupt or truncated file (``OSError`` when it cannot be read)."""
    path = Path(path)
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError(f"not a safetensors file ({size} bytes)")
        (n,) = struct.unpack("<Q", head)
        if n > min(size - 8, _MAX_HEADER):
            raise ValueError(f"not a safetensors file (header length {n} in a file of {size} bytes)")
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError("not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise ValueError("not a safetensors file (its header is not a JSON object)")
    data_size = size - 8 - n
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (start, end) = info["dtype"], info["shape"], info["data_offsets"]
            numel = 1
            for d in shape:
                numel *= int(d)
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"tensor {name!r}: bad header entry") from None
        if dtype not in _ITEMSIZE:
            raise ValueError(f"tensor {name!r}: unsupported dtype {dtype!r}")
        if not (isinstance(start, int) and isinstance(end, int) and 0 <= start <= end <= data_size):
            raise ValueError(
                f"tensor {name!r}: data {start}..{end} outside the file's {data_size} data bytes (truncated?)"
            )
        if end - start != numel * _ITEMSIZE[dtype]:
            raise ValueError(f"tensor {name!r}: {end - start} bytes for shape {shape} of {dtype}")
    return header, 8 + n


def iter_safetensors(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    try:
        from safetensors.torch import safe_open
    except ImportError:
        safe_open = None  # type: ignore[assignment,misc]  # baseline (issue 46)
    if safe_open is not None:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)
        return
    header, base = check_safetensors(path)
    data = Path(path).read_bytes()
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in _DTYPES:
            raise ValueError(f"tensor {name!r}: dtype {info['dtype']} needs the safetensors package")
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
