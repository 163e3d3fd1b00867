"""The torch.compile programs the torch engine's tests run, written as files: each is the user's own program,
which knows nothing of cachetool. Tiny on purpose: a CPU compile of each takes seconds."""

from __future__ import annotations

from pathlib import Path

# A small transformer: one pre-norm block, attention with two heads and an MLP; prints its output's sum.
TRANSFORMER = """
import sys
import torch


class Block(torch.nn.Module):
    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        att = torch.softmax(torch.einsum("bqhd,bkhd->bhqk", q, k) / (d // self.heads) ** 0.5, dim=-1)
        x = x + self.out(torch.einsum("bhqk,bkhd->bqhd", att, v).reshape(b, t, d))
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))


torch.manual_seed(0)
model = torch.compile(Block().eval())
with torch.no_grad():
    print("output", round(float(model(torch.randn(2, 8, 16)).sum()), 4))
"""

# Dynamic shapes: one graph compiled for any length (dynamic=True); the lengths come from the command line.
DYNAMIC = """
import sys
import torch


@torch.compile(dynamic=True)
def scale(x):
    return torch.nn.functional.silu(x) * x.shape[0] + x.mean()


for n in map(int, sys.argv[1:]):
    print("length", n, round(float(scale(torch.linspace(-1, 1, n)).sum()), 4))
"""

# A server: compiles on its first request, answers /health at once; port from the command line.
SERVER = """
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

import torch

gelu2 = torch.compile(lambda x: torch.nn.functional.gelu(x) * 2 + 1)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.answer({"ok": True})

    def do_POST(self):
        n = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["n"]
        self.answer({"sum": round(float(gelu2(torch.arange(n, dtype=torch.float32)).sum()), 4)})

    def answer(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""

# Runs until stopped, after writing its pid: what a stop signal must end.
SLEEPER = """
import os
import sys
import time

with open(sys.argv[1], "w") as f:
    f.write(str(os.getpid()))
time.sleep(600)
"""


def write(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, text in (("transformer", TRANSFORMER), ("dynamic", DYNAMIC), ("server", SERVER), ("sleeper", SLEEPER)):
        out[name] = folder / f"{name}.py"
        out[name].write_text(text)
    return out
