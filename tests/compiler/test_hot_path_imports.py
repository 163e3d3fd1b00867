"""Issue 21: what the hot path's stand-ins for Inductor's compile-time modules promise (compiler/torch_compat/).

A hit resolves ``extern_kernels.<name>`` (what generated wrapper code calls) to ``torch.<name>`` without importing
``select_algorithm`` and ``lowering``; that must be the very kernel Inductor registers under that name, for every
registered name for which it answers at all. The fresh-process check that a hit imports none of those modules is
in test_aot_hot_start.py (it shares that file's warmed caches).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

from compiler import torch_compat
from tests.cli_calls import REPO, cli_env


def _fresh_process_json(code: str):
    """What ``code``, run in a fresh interpreter (nothing of torch's imported yet), prints last, as JSON."""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), cwd=str(REPO), timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_torch_shortcut_is_the_registered_kernel_or_nothing() -> None:
    select_algorithm = importlib.import_module("torch._inductor.select_algorithm")  # fills the registry
    registry = select_algorithm.ExternKernelChoice._registry
    assert {"mm", "addmm", "bmm"} <= set(registry)
    answered = 0
    for name in registry:
        fn = torch_compat.torch_extern_kernel(name)
        if fn is not None:
            assert fn is getattr(select_algorithm.extern_kernels, name), name
            answered += 1
    assert answered >= 3
    assert torch_compat.torch_extern_kernel("mm_dtype") is None  # renamed: from the registry
    assert torch_compat.torch_extern_kernel("bias_addmm") is None  # a function of Inductor's own


def test_stand_ins_give_way_to_the_real_modules() -> None:
    """Inside a load, a name the stand-in lacks imports the real module; afterwards no stand-in is left."""
    code = (
        "import json, sys, torch\n"
        "from compiler import torch_compat\n"
        "with torch_compat.runtime_stand_ins():\n"
        "    from torch._inductor.select_algorithm import extern_kernels\n"
        "    before = 'torch._inductor.lowering' in sys.modules\n"
        "    mm = extern_kernels.mm\n"
        "    still = 'torch._inductor.lowering' in sys.modules\n"
        "    from torch._inductor.select_algorithm import AlgorithmSelectorCache\n"
        "left = [n for n in torch_compat.STAND_INS if type(sys.modules.get(n)).__name__ == '_StandIn']\n"
        "print(json.dumps({'before': before, 'still': still, 'mm': mm is torch.mm,\n"
        "                  'real': 'torch._inductor.lowering' in sys.modules, 'left': left}))\n"
    )
    assert _fresh_process_json(code) == {"before": False, "still": False, "mm": True, "real": True, "left": []}


def test_the_start_imports_no_dynamo_or_inductor_module_while_the_prefetch_does() -> None:
    """Dynamo's and Inductor's modules import each other: a second thread importing one of them while the
    background prefetch imports them can meet a partly initialized module, and the start fails with "partially
    initialized module 'torch._dynamo' has no attribute 'utils'" (seen in a full suite run). Building the model
    runner (the prefetch runs through it) imports none of them on the main thread while the prefetch is alive
    (enable_compile's AOT check imported torch._dynamo.aot_compile)."""
    code = (
        "import builtins, json, threading\n"
        "import torch\n"
        "from compiler.config import CompilationConfig\n"
        "from compiler.runner import ModelRunner\n"
        "from compiler.torch_compat import hot_start\n"
        "real, seen = builtins.__import__, []\n"
        "def watch(name, globals=None, locals=None, fromlist=(), level=0):\n"
        "    running = hot_start.prefetch_running()\n"
        "    if running and threading.current_thread() is threading.main_thread():\n"
        "        names = [name] + [f'{name}.{x}' for x in fromlist or ()]\n"
        "        seen.extend(n for n in names if n.startswith(('torch._dynamo', 'torch._inductor')))\n"
        "    return real(name, globals, locals, fromlist, level)\n"
        "builtins.__import__ = watch\n"
        "ModelRunner('tiny', 'cpu', CompilationConfig())\n"
        "builtins.__import__ = real\n"
        "print(json.dumps(seen))\n"
    )
    assert _fresh_process_json(code) == []


def test_a_process_that_ends_while_the_prefetch_imports_waits_for_it() -> None:
    """A start can end while the background prefetch still imports Dynamo and Inductor (a miss found early, an
    error): the interpreter must not finalize under that thread (a daemon thread's C++ imports during finalization
    aborted a process with SIGABRT, its exit code lost). By the time exit handlers run, the prefetch is done."""
    code = (
        "import atexit, json\n"
        "import torch\n"
        "from compiler import torch_compat\n"
        "atexit.register(lambda: print(json.dumps(torch_compat.prefetch_running())))\n"
        "torch_compat.prefetch_artifact_loader()\n"
        "assert torch_compat.prefetch_running()\n"
    )
    assert _fresh_process_json(code) is False
