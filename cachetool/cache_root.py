"""The cache root: one value, resolved once, and every name cachetool gives or reads on disk under it.

A verb that reads or writes a cache root (warm, check, pull, install) resolves it once, with :meth:`CacheRoot.of`:
the ``--cache-root`` flag, else the root the engine's own configuration names, else the variable the engine's
servers read it from (:class:`RootDeclared`), else that engine's default; every layer after that takes the value
(:attr:`CacheRoot.path` to make and lock it, :attr:`CacheRoot.resolved` where a start writes or a server is told
where to read). A root a library caller names as a path becomes one with :meth:`CacheRoot.given`. Nothing outside
this module expands or resolves a cache root (tests/structure/test_cache_root.py).

Under the root, the names cachetool itself gives (the engines name their own folders:
:mod:`cachetool.engines.root_names`)::

    {root}/
      .cachetool-partial/                                PARTIAL_DIR: a pull's partial downloads (a rerun resumes)
      .cachetool-staging-*/                              an install's staging folder (cachetool.install.fs)

An install unit is a key folder (one per rank where it has ranks) or a shared folder an engine keeps at the top of
the root: installed whole or not at all.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Protocol

PARTIAL_DIR = ".cachetool-partial"


class RootDeclared(Protocol):
    """What :meth:`CacheRoot.of` reads of an engine: its root's variable, its own variables and its default."""

    cache_root_variable: str
    variables: tuple[Any, ...]
    cache_root_default: str


@dataclasses.dataclass(frozen=True)
class CacheRoot:
    """A resolved cache root: its path (``~`` expanded) and where the path came from."""

    path: Path
    source: str  # "flag", "config" (the engine's own configuration names it), the variable's name, or "default"

    @classmethod
    def of(
        cls, flag: str | os.PathLike | None, engine: RootDeclared, configured: str | os.PathLike | None = None
    ) -> CacheRoot:
        """``flag`` (``--cache-root``), else the root the engine's own configuration names (``configured``), else
        ``engine``'s variable, else its default; ``~`` expanded."""
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
