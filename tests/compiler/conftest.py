"""Shared setup of the compiler tests (CPU, tiny model).

TORCHINDUCTOR_VEC_ISA_OK=1 is set for this process (and by tests/cli_calls.py's ``cli_env`` for every subprocess):
it skips Inductor's ~9.5 s per-process build check of each vector ISA on this box (the detected ISA is trusted). It
is excluded from the cache key (it changes no generated code), so caches warmed with or without it are
interchangeable.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

os.environ["TORCHINDUCTOR_VEC_ISA_OK"] = "1"


def copy_warmed(tiny_warm: dict, dest: Path) -> tuple[Path, dict]:
    """A copy of the shared cold warm's root at ``dest`` and its compile --json object with the paths in it
    pointing into the copy (as if that warm had run there): for a module that starts on the root or edits it."""
    shutil.copytree(tiny_warm["root"], dest, symlinks=True)
    text = json.dumps(tiny_warm["summary"]["compile"])
    return dest, json.loads(text.replace(str(tiny_warm["root"].resolve()), str(dest.resolve())))
