"""Coordinate-descent results used again on a cache hit, on the torch releases that tune again instead.

A ``max-autotune`` program (or one with ``coordinate_descent_tuning``) tunes each pointwise and reduction Triton
kernel at its first launch and saves the winner beside the kernel (``*.best_config``, ``found_by_coordesc: true``).
When a later process loads the compiled graph from the FX-graph cache, Inductor hands it the kernels it compiled
(statically launchable) and :meth:`CachingAutotuner.recheck_autotune_cache` looks the winner up again. In torch 2.11
that method drops it in two cases (PyTorch issue #172819; torch 2.13 has the fix, 2.12 was not checked and is
treated as 2.11): a kernel compiled with one config never takes the cached winner, and a winner that is among the
compiled configs loses its "found by coordinate descent" mark. Either way the first launch tunes again: it
benchmarks neighbouring configs, builds the ones it has not seen (new Triton kernels in a pulled root: 16 on the
H100 for a 2-layer GPT), and rewrites the results.

This module gives torch 2.11 and 2.12 torch 2.13's rule, with one thing more on every release it knows (2.11 to
2.13): the autotune results are looked up, and saved, beside the kernel in this process's Inductor cache, not at
the path the loaded autotuner names (the warm's root, which a pod that pulled does not have; torch 2.13's own method
looks there too). A later release is left as it is until it is checked. Like the engine's probe it runs in the
program's interpreter and imports neither cachetool nor compiler (the standard library, and torch once the program
imports Inductor's runtime): the engine copies it as ``sitecustomize.py`` into a folder of the cache root
(:mod:`cachetool.engines.torch.autotune_site`), and the server environment a pull prints puts that folder on
``PYTHONPATH``. At start-up it runs the ``sitecustomize`` it shadows and waits for
``torch._inductor.runtime.triton_heuristics`` to be imported; importing torch here would cost every Python process
of the program seconds. Private API: ``CachingAutotuner.recheck_autotune_cache`` and what it calls
(``check_autotune_cache``, ``triton_config_to_hashable``, ``CachingAutotuner._precompile_config``); where one is
missing, torch is left as it is and one line says so. ``cache_dir_utils.cache_dir`` places the kernel here; without
it the path stays as torch has it. ``cachetool_autotune_reuse.json`` beside the copy
(``{"force": true}``) applies it on any torch: the tests' way to see it work on a release it leaves alone.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import sys

HEURISTICS = "torch._inductor.runtime.triton_heuristics"
NEEDED_FROM = (2, 11)  # the first release measured with the bug (the H100, torch 2.11.0+cu130)
LAST_CHECKED = (2, 13)  # takes a cached winner whatever the number of compiled configs, but at the warm's path
CONFIG = "cachetool_autotune_reuse.json"  # beside the copy: {"force": true} applies it on any torch

_here = os.path.dirname(os.path.abspath(__file__))


def kernel_path_here(filename: str | None) -> str | None:
    """Where the kernel module ``filename`` lies in this process's Inductor cache. An autotuner loaded from the
    FX-graph cache keeps the path its kernel was compiled at, in the warm's root, and Inductor looks up its autotune
    results beside that path: on a pod where the warm's root is not, it finds none and tunes again. Inductor keeps
    its kernels at ``{cache}/{name[1:3]}/{name}.py``, so the same two last parts under this process's cache are the
    kernel's place here; ``filename`` is kept where this cache has no such folder."""
    if not filename:
        return filename
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir
    except ImportError:  # a torch unlike the ones this was written for: the path as torch has it
        return filename
    name, parent = os.path.basename(filename), os.path.basename(os.path.dirname(filename))
    if parent != name[1:3]:  # not where Inductor puts a kernel module: left as it is
        return filename
    folder = os.path.join(cache_dir(), parent)
    return os.path.join(folder, name) if os.path.isdir(folder) else filename


def recheck_autotune_cache(self, reload_kernel_from_src) -> None:
    """torch 2.13's rule: the cached winner is taken whatever the number of compiled configs, with its "found by
    coordinate descent" mark; a winner no compiled config matches is compiled (from Triton's cache, where the warm
    left it). Its results are looked up, and saved, beside the kernel where this process's cache holds it
    (:func:`kernel_path_here`), not at the warm's path the loaded autotuner names."""
    from torch._inductor.runtime import triton_heuristics as heuristics

    self.filename = kernel_path_here(self.filename)
    configs = [result.config for result in self.compile_results]
    cached, cache, info = heuristics.check_autotune_cache(configs, self.filename, self.inductor_meta)
    self.autotune_cache_info = info
    self.save_cache_hook = cache.save if cache is not None else None  # as torch builds it: beside the kernel here
    if len(cached) != 1:
        return
    best = cached[0]
    by_coordesc = getattr(best, "found_by_coordesc", False)
    wanted = heuristics.triton_config_to_hashable(best)
    for result in self.compile_results:
        if heuristics.triton_config_to_hashable(result.config) == wanted:
            result.config.found_by_coordesc = by_coordesc
            self.compile_results = [result]
            return
    if self.fn.fn is None:
        self.fn = reload_kernel_from_src().fn
    self.compile_results = [self._precompile_config(best)]


def needed(version: str) -> bool:
    """Whether torch ``version`` (``2.11.0+cu130``) tunes again on a cache hit in a root pulled to another path:
    2.11 (measured: drops the cached winner too), 2.12 (not checked, taken as 2.11) and 2.13 (read in its code and
    tested: looks up the winner at the warm's path); not earlier releases, never run here, nor later ones, whose
    method this has not been checked against."""
    try:
        major, minor = (int(part) for part in version.split("+")[0].split(".")[:2])
    except ValueError:
        return False
    return NEEDED_FROM <= (major, minor) <= LAST_CHECKED


def apply(heuristics, force: bool = False) -> bool:
    """Give ``heuristics`` (the imported ``triton_heuristics`` module) torch 2.13's rule where its torch needs it
    (``force``: on any torch); whether it did. A torch that needs it but lacks what it calls is left as it is, and
    one line on stderr says so."""
    import torch

    if not (force or needed(torch.__version__)):
        return False
    autotuner = getattr(heuristics, "CachingAutotuner", None)
    missing = [
        name
        for name, owner in (
            ("CachingAutotuner", heuristics),
            ("check_autotune_cache", heuristics),
            ("triton_config_to_hashable", heuristics),
            ("recheck_autotune_cache", autotuner),
            ("_precompile_config", autotuner),
        )
        if owner is None or not hasattr(owner, name)
    ]
    if missing or autotuner is None:
        print(
            f"cachetool: torch {torch.__version__} lacks {', '.join(missing)}: its Triton kernels tune again at "
            "every start (coordinate descent's saved results are not used)",
            file=sys.stderr,
        )
        return False
    autotuner.recheck_autotune_cache = recheck_autotune_cache
    return True


# ---------------------------------------------------------------------------------------------- as sitecustomize


class _HeuristicsWatch:
    """A finder that applies the rule once the program imports Inductor's runtime heuristics."""

    def find_spec(self, name, path=None, target=None):
        if name != HEURISTICS:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            try:
                apply(module, _forced())
            except Exception as exc:  # noqa: BLE001 - a torch unlike the ones this was written for: left as it is
                print(f"cachetool: coordinate descent's saved results not used: {exc!r}", file=sys.stderr)

        spec.loader.exec_module = exec_module
        return spec

    def invalidate_caches(self) -> None:
        pass


def _chain_shadowed() -> None:
    """Run the ``sitecustomize`` this file shadows: the next one on the path after this folder (a distribution's
    own); never one before it (the torch engine's probe, first on the path, runs this one as the one it shadows)."""
    entries = [os.path.abspath(p or os.getcwd()) for p in sys.path]
    after = sys.path[entries.index(_here) + 1 :] if _here in entries else sys.path
    rest = [p for p in after if os.path.abspath(p or os.getcwd()) != _here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or os.path.dirname(os.path.abspath(spec.origin or "")) == _here:
        return
    try:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    except Exception as exc:  # noqa: BLE001 - as Python treats a failing sitecustomize
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback: {exc!r}", file=sys.stderr)


def _forced() -> bool:
    try:
        with open(os.path.join(_here, CONFIG)) as f:
            return json.load(f).get("force") is True
    except (OSError, ValueError, AttributeError):
        return False


def install_at_startup() -> None:
    _chain_shadowed()
    if HEURISTICS in sys.modules:
        apply(sys.modules[HEURISTICS], _forced())
    else:
        sys.meta_path.insert(0, _HeuristicsWatch())


if __name__ == "sitecustomize":
    install_at_startup()
