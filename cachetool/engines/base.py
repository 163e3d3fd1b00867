"""What cachetool needs from a compiler, declared once: the one boundary between cachetool and an engine.

An engine warms a cache root headless and reports one start (:class:`StartRequest` in, a :class:`StartResult` that
renders itself out), says which facts of this machine its caches depend on, answers pull's key question before
any download (:class:`KeyCheckRequest` in, a :class:`KeyCheck` out), checks and compares its keys' recorded
factors, and names the variable its servers read their cache root from. Nothing outside ``cachetool/engines/``
names an engine or builds one (tests/structure/): it asks the registry (:mod:`cachetool.engines`) by
``--engine`` name, by a bundle's layout or by a bundle's fingerprint.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from cachetool.cache_root import CacheRoot
from cachetool.layouts.factors import Difference, Factors


@dataclasses.dataclass(frozen=True)
class StartRequest:
    """One start of an engine (``warm`` or ``check``), with the options of every engine. An engine refuses, in one
    line, an option of another engine that the caller set (``given``): the native engine flags after ``--``,
    the vLLM engine ``--device``, ``-cc`` and the rank options. Each option's default is written here alone."""

    command: str                      # "warm" or "check"
    model: str | None                 # None: from the flags (vLLM: `vllm serve M`), or none (an engine that runs
                                      # the user's own command), or refused
    cache_root: CacheRoot             # resolved once, by the caller
    device: str = "cpu"
    config: Any = None                # the engine's settled config (StartConfig.config: native, a CompilationConfig)
    overrides: tuple[str, ...] = ()   # native: -cc.k=v
    flags: tuple[str, ...] = ()       # vLLM: `vllm serve` flags
    load_weights: bool = False        # vLLM: the model's weights instead of dummy ones
    rank: int = 0
    dp_rank: int = 0
    tensor_parallel_size: int = 1
    share_ranks: bool = True
    require_hit: bool = False
    events: Callable[[Any], None] | None = None     # native: its progress events (piece i of n, sizes, autotune)
    messages: Callable[[str], None] | None = None   # vLLM: its message lines
    given: frozenset[str] = frozenset()  # the options above that the caller set, by field name

    def __post_init__(self) -> None:
        object.__setattr__(self, "overrides", tuple(self.overrides))
        object.__setattr__(self, "flags", tuple(self.flags))
        object.__setattr__(self, "given", frozenset(self.given))

    def was_given(self, name: str) -> bool:
        return name in self.given


@dataclasses.dataclass(frozen=True)
class StartConfig:
    """A start's configuration as its engine reads it, settled once, before the start's request is built: ``config``
    (the native engine's ``CompilationConfig``, parsed with its overrides applied; another engine's as given) and the
    cache root it names (the native engine's ``-cc.cache_dir``, else None), which comes after ``--cache-root`` and
    before the engine's variable (:class:`cachetool.cache_root.CacheRoot`)."""

    config: Any
    root: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class KeyCheckRequest:
    """Pull's key question for a server (``pull --model M`` and, for vLLM, its flags after ``--``); each field's
    default is written here alone."""

    cache_root: CacheRoot
    model: str | None = None
    device: str = "cpu"
    config: Any = None
    overrides: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    tensor_parallel_size: int = 1
    timeout: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "overrides", tuple(self.overrides))
        object.__setattr__(self, "flags", tuple(self.flags))

    def asks(self) -> bool:
        """Whether it names a server at all (a model, a config, flags, a tensor-parallel size): a pull without one
        asks no key question."""
        return self != KeyCheckRequest(cache_root=self.cache_root, device=self.device, timeout=self.timeout)


@runtime_checkable
class StartResult(Protocol):
    """One start of an engine on a cache root (``warm`` or ``check``)."""

    command: str
    cache_root: str
    cache_key: str | None
    startup_seconds: float

    @property
    def hit(self) -> bool: ...

    @property
    def graphs_compiled(self) -> int: ...

    @property
    def graphs_loaded(self) -> int: ...

    def to_json(self) -> dict[str, Any]: ...

    def lines(self) -> list[str]:
        """The start as a few lines for a terminal."""
        ...

    def pack_folder(self) -> Path:
        """What a warm's ``--push`` packs."""
        ...


class KeyCheck(Protocol):
    """Pull's preflight question for a server: which of a bundle's key folders it will use (or a
    :class:`~cachetool.errors.PreflightError` naming what differs). ``compiles_nothing``: why this server compiles
    no graph (an eager server), so that it reads no key folder, only the bundle's folders that belong to no key (vLLM's
    own Triton kernels, its model-inspection cache): the install takes those alone; None when it compiles."""

    compiles_nothing: str | None

    def expected_for(self, manifest: Any) -> str: ...

    def describe(self) -> str | None:
        """How the verdict was reached, for the preflight's line (None: nothing to add)."""
        ...


class Engine(Protocol):
    name: str                       # --engine
    summary: str                    # one line for --engine's help: what it starts, and what it takes
    layout: str                     # the bundle layout its cache trees pack as (a manifest's "layout")
    key_kinds: tuple[str, ...]      # the kinds of key folder its layout lists (a manifest's keys[].kind)
    cache_root_variable: str        # where its servers read the cache root from
    variables: tuple[Any, ...]      # the variables it reads beyond cachetool's registry (cachetool.envs.EnvVar)
    cache_root_default: str         # where they read it without the variable
    fingerprint_fields: tuple[str, ...]  # the fingerprint fields only its caches depend on (preflight compares)
    recorded_fields: tuple[str, ...]     # fingerprint fields it records and nobody compares (the GPU driver)
    platform_fields: tuple[str, ...]     # fingerprint fields its platform key names after the device (CPU ISA)
    local_by_server: bool           # diff's "local" side: its server computes the key (needs the server's flags)

    def layout_rules(self) -> Any:
        """Its layout: a module with ``NAME``, ``detect(path)`` and ``scan(path)`` and, where it states them,
        ``incomplete_reason(unit_dir, ranked)`` and ``stale_entries(root)`` (:mod:`cachetool.engines.layouts`)."""
        ...

    def server_environment(self, root: Path) -> dict[str, str]:
        """The variables its server must be started with to read a cache installed at ``root`` (what ``pull``
        prints for the server's command, and ``check`` compares with the environment it runs in)."""
        ...

    def start_config(self, config: Any, overrides: tuple[str, ...]) -> StartConfig:
        """A start's configuration settled once (parsed, where the engine parses one) and the cache root it names:
        the request carries the settled config, and the start reads it without parsing it again."""
        ...

    def warm(self, request: StartRequest) -> StartResult: ...

    def check(self, request: StartRequest) -> StartResult:
        """``request.require_hit``: a start that compiled raises a cache-miss error naming why."""
        ...

    def machine_facts(self, device: str | None) -> dict[str, str | None]:
        """Fingerprint fields beyond the common ones (``cachetool.bundle.fingerprint``) that its caches depend on."""
        ...

    def notice(self) -> str | None:
        """A line the user must read before a warm, pull or check does any work (vLLM: its release is outside
        the tested ones), or None."""
        ...

    def recognizes(self, fingerprint: dict) -> bool:
        """Whether a bundle of this fingerprint holds this engine's caches."""
        ...

    def platform_prefix(self, fingerprint: dict) -> str | None:
        """What leads the platform key of its bundles (``vllm0.32.0``), so that two engines' bundles of one machine
        sit side by side under one tag; None: nothing (:func:`cachetool.bundle.manifest.platform_key`)."""
        ...

    def key_check(self, request: KeyCheckRequest) -> KeyCheck | None: ...

    def check_factors(self, manifest: Any, device: str) -> list[str]:
        """The install preflight's own checks of a bundle's recorded factors against this machine (raises a
        ``PreflightError`` naming the first difference); what it checked."""
        ...

    def compare_keys(self, a: Factors | None, b: Factors | None, *, only: tuple[str, ...] | None = None,
                     cache: str = "") -> list[Difference]:
        """Every field where two keys' recorded factors differ (``only``: these factors; None: all)."""
        ...

    def key_lines(self, factors: Factors) -> list[str]:
        """A key folder's recorded factors in a few lines for ``inspect`` (what a server must be started with to
        use it, what built it); none where the factor hashes say all."""
        ...

    def local_factors(self, device: str) -> Factors | None:
        """The factors this machine would record without a model (diff's ``local``), or None."""
        ...

    def server_differences(self, keys: list[tuple[str, Factors | None]], model: str, flags: list[str],
                           scratch: Path) -> list[Difference]:
        """How the closest of a bundle's keys (``(folder name, recorded factors)``, as ``diff`` read them) differs
        from the key this engine's server computes."""
        ...
