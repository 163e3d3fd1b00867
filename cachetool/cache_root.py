"""The cache root: one value, resolved once, and every name cachetool gives or reads on disk under it.

A verb that reads or writes a cache root (warm, check, pull, install) resolves it once, with :meth:`CacheRoot.of`:
the ``--cache-root`` flag, else the root the engine's own configuration names (the native engine's
``-cc.cache_dir``), else the variable the engine's servers read it from (``CACHETOOL_CACHE_ROOT`` for the
native engine, ``VLLM_CACHE_ROOT`` for vLLM), else that engine's default; every layer after that takes the value
(:attr:`CacheRoot.path` to make and lock it, :attr:`CacheRoot.resolved` where a start writes or a server is told
where to read). A root a library caller names as a path becomes one with :meth:`CacheRoot.given`. Nothing outside
this module expands or resolves a cache root (tests/structure/test_cache_root.py).

The tree (names defined here once; the layouts, the installer and the engines import them)::

    {root}/
      torch_compile_cache/                               TCC: both engines' compiled code
        {hash10}/rank_{r}_{dp}/{prefix}/                 a piecewise key folder per rank (RANK_RE); the native
          cache_key_factors.json                         engine's, and vLLM's piecewise graphs (prefix "backbone")
          compile_index.json, artifact_*, aot_entry.bin  (the native engine's: docs/ARCHITECTURE.md)
          inductor_cache/, triton_cache/                 Inductor's and Triton's caches during compile and load
        torch_aot_compile/{hash}/rank_{r}_{dp}/          AOT: vLLM's AOT key folder (torch >= 2.10)
          model, cache_key_factors.json                  the artifact; the key inputs `warm --engine vllm` records
      modelinfos/                                        MODELINFOS: vLLM's model inspection cache
      triton_cache/                                      TRITON_CACHE: TRITON_CACHE_DIR of a vLLM server
      .cachetool-partial/                                PARTIAL_DIR: a pull's partial downloads (a rerun resumes)
      .cachetool-staging-*/                              an install's staging folder (cachetool.install.fs)
      .cachetool-incomplete/{start}.json                 INCOMPLETE_DIR: a vLLM start not finished, and the key
                                                         folders it left unfinished (engines/vllm/unfinished.py)

An install unit is a key folder (one per rank where it has ranks) or a shared folder (``modelinfos/``,
``triton_cache/``): installed whole or not at all.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any, Protocol

TCC = "torch_compile_cache"
AOT = "torch_aot_compile"
RANK_RE = re.compile(r"^rank_\d+_\d+$")
FACTORS_FILE = "cache_key_factors.json"
MODELINFOS = "modelinfos"
TRITON_CACHE = "triton_cache"
PARTIAL_DIR = ".cachetool-partial"
INCOMPLETE_DIR = ".cachetool-incomplete"


class RootDeclared(Protocol):
    """What :meth:`CacheRoot.of` reads of an engine (``cachetool.engines.base.Engine`` declares it; the engines
    import the names below, so this module names no engine)."""

    cache_root_variable: str
    variables: tuple[Any, ...]
    cache_root_default: str


@dataclasses.dataclass(frozen=True)
class CacheRoot:
    """A resolved cache root: its path (``~`` expanded) and where the path came from."""

    path: Path
    source: str  # "flag", "config" (the engine's own configuration names it), the variable's name, or "default"

    @classmethod
    def of(cls, flag: str | os.PathLike | None, engine: RootDeclared,
           configured: str | os.PathLike | None = None) -> CacheRoot:
        """``flag`` (``--cache-root``), else the root the engine's own configuration names (``configured``: the
        native engine's ``-cc.cache_dir``), else ``engine``'s variable, else its default; ``~`` expanded."""
        from cachetool import envs

        if flag is not None and str(flag) != "":
            return cls(Path(flag).expanduser(), "flag")
        if configured:
            return cls(Path(configured).expanduser(), "config")
        value = envs.raw(engine.cache_root_variable, engine.variables)
        if value:
            return cls(Path(value).expanduser(), engine.cache_root_variable)
        return cls(Path(engine.cache_root_default).expanduser(), "default")

    @classmethod
    def given(cls, root: CacheRoot | str | os.PathLike) -> CacheRoot:
        """The root a caller names: a :class:`CacheRoot` as it is, a path (a library caller's) as the flag."""
        return root if isinstance(root, CacheRoot) else cls(Path(root).expanduser(), "flag")

    @property
    def resolved(self) -> Path:
        """The path absolute, links resolved (at the time of asking: a root made since resolves through it): where a
        start writes, and what a server is told to read."""
        return self.path.resolve()
