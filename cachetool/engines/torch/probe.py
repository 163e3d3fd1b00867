"""cachetool's probe inside a torch.compile program (``--engine torch``): what this process compiled and loaded.

The engine copies this file as ``sitecustomize.py`` into a folder of its own, beside ``cachetool_torch_probe.json``
(where reports go), and puts that folder first on the program's ``PYTHONPATH``: every Python process the command
starts (the program, its workers, Inductor's compile workers) imports it at start-up, before the program's own
code, and the program needs to know nothing of it. It imports only the standard library at start-up (no torch:
a process that never imports torch pays nothing but a file read); it runs the ``sitecustomize`` it shadows; and it

- hooks Dynamo's compile callbacks when the program imports ``torch._dynamo`` (the time compiling, and a report
  written after each compile, so that a server stopped with SIGKILL still leaves its last one);
- writes ``{pid}.json`` at exit: Dynamo's counters (FX-graph cache hits, misses and bypasses, AOTAutograd's,
  autotuning, graphs traced), the Inductor settings in effect (its portable config less what its own cache key
  leaves out), torch's versions and the device it used, and the Inductor kernel libraries it mapped.

This module imports neither cachetool nor compiler: it runs in the program's interpreter, which may have neither.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import sys
import threading
import time

CONFIG = "cachetool_torch_probe.json"
LONG = 200  # an Inductor setting longer than this is recorded by its digest
COUNTER_GROUPS = ("inductor", "aot_autograd", "stats", "frames")

_here = os.path.dirname(os.path.abspath(__file__))
_state = {"compiles": 0, "compile_seconds": 0.0, "depth": 0, "since": 0.0, "started": time.time()}
_lock = threading.Lock()


def _config() -> dict:
    try:
        with open(os.path.join(_here, CONFIG)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _chain_shadowed() -> None:
    """Run the ``sitecustomize`` this module shadows (a distribution's own, e.g. Debian's), as Python would have."""
    import importlib.machinery
    import importlib.util

    rest = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or os.path.dirname(os.path.abspath(spec.origin or "")) == _here:
        return
    try:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    except Exception as exc:  # noqa: BLE001 - as Python treats a failing sitecustomize: a line, and on
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback: {exc!r}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------- Dynamo's hooks


def _on_start(*_args) -> None:
    with _lock:
        if _state["depth"] == 0:
            _state["since"] = time.perf_counter()
        _state["depth"] += 1


def _on_end(*_args) -> None:
    with _lock:
        _state["depth"] = max(0, _state["depth"] - 1)
        _state["compiles"] += 1
        if _state["depth"] == 0:
            _state["compile_seconds"] += time.perf_counter() - _state["since"]
    _write(final=False)


def _hook_dynamo() -> None:
    try:
        from torch._dynamo.callback import callback_handler

        callback_handler.register_start_callback(_on_start)
        callback_handler.register_end_callback(_on_end)
    except Exception:  # noqa: BLE001 - a torch without the hooks: the exit report still counts
        pass


class _DynamoWatch:
    """A finder that hooks Dynamo once the program imports it (importing it here would cost seconds)."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch._dynamo":
            return None
        import importlib.machinery

        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _hook_dynamo()

        spec.loader.exec_module = exec_module
        return spec

    def invalidate_caches(self) -> None:
        pass


# ---------------------------------------------------------------------------------------------- the report


def _short(value):
    text = json.dumps(value, sort_keys=True, default=repr)
    if len(text) <= LONG:
        return json.loads(text)
    return f"sha256:{hashlib.sha256(text.encode()).hexdigest()[:16]} ({len(text)} chars)"


def _inductor_settings() -> dict | None:
    """Inductor's portable config as this process has it, less what Inductor's own cache key leaves out."""
    config = sys.modules.get("torch._inductor.config")
    if config is None:
        return None
    ignored = tuple(getattr(config, "_cache_config_ignore_prefix", ()))
    return {k: _short(v) for k, v in sorted(config.save_config_portable().items()) if not k.startswith(ignored)}


def _device(torch) -> dict:
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_initialized():
        index = cuda.current_device()
        major, minor = cuda.get_device_capability(index)
        return {"device": "cuda", "gpu": cuda.get_device_name(index), "capability": f"sm{major}{minor}"}
    return {"device": "cpu", "gpu": None, "capability": None}


def _mapped_kernels(root: str) -> list[str]:
    """The Inductor kernel libraries this process mapped from the cache root (CPU kernels are ``.so`` files)."""
    out = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split(None, 5)[-1].strip()
                if root and path.startswith(root + os.sep) and path.endswith(".so"):
                    out.add(path)
    except OSError:
        pass
    return sorted(out)


def _report(final: bool) -> dict | None:
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "__version__"):
        return None
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", {}) if utils is not None else {}
    triton = sys.modules.get("triton")
    version = getattr(torch, "version", None)
    with _lock:
        compiles, seconds = _state["compiles"], round(_state["compile_seconds"], 3)
    return {
        "pid": os.getpid(),
        "argv": list(sys.argv),
        "final": final,
        "seconds": round(time.time() - _state["started"], 3),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "torch": torch.__version__,
        "cuda": getattr(version, "cuda", None),
        "triton": getattr(triton, "__version__", None),
        **_device(torch),
        "counters": {g: {k: int(v) for k, v in counters.get(g, {}).items()} for g in COUNTER_GROUPS},
        "compiles": compiles,
        "compile_seconds": seconds,
        "inductor": _inductor_settings(),
        "mapped_kernels": _mapped_kernels(_config().get("root", "")),
    }


def _write(final: bool) -> None:
    """This process's report, replaced whole (a reader never sees half of one)."""
    try:
        report = _report(final)
        folder = _config().get("reports")
        if report is None or not folder:
            return
        path = os.path.join(folder, f"{os.getpid()}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(report, f, sort_keys=True, default=repr)
        os.replace(path + ".tmp", path)
    except Exception:  # noqa: BLE001 - the probe never fails the program
        pass


def _install() -> None:
    _chain_shadowed()
    if "torch._dynamo" in sys.modules:
        _hook_dynamo()
    else:
        sys.meta_path.insert(0, _DynamoWatch())
    atexit.register(_write, True)


_install()
