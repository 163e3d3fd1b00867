"""What cachetool needs from a compiler, declared once: the one boundary between cachetool and an engine.

An engine is a small thing (:class:`Engine`): it parses a start's options into its own frozen request and runs it
(``warm`` or ``check``), parses pull's key question into its own request and answers it before any download, says
which facts of this machine its caches depend on, names its layout, and names the environment its servers read
their cache root from. What only some engines state (fingerprint fields of their own, a release notice, how a
key folder reads in ``inspect``, ``diff``'s comparison against a server) has a default in :class:`EngineBase`,
which every engine extends and overrides where it has something to say.

Nothing outside ``cachetool/engines/`` names an engine or builds one (tests/structure/): it asks the registry
(:mod:`cachetool.engines`) by ``--engine`` name, by a bundle's layout or by a bundle's fingerprint, and hands an
engine's request back to the same engine as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from cachetool.cache_root import CacheRoot
from cachetool.errors import UsageError
from cachetool.layouts.factors import Difference, Factors

if TYPE_CHECKING:  # the core's protocol (cachetool.install.key_check): an engine's key_check answers one
    from cachetool.install.key_check import KeyCheck

__all__ = [
    "Engine",
    "EngineBase",
    "LISTENERS",
    "START_OPTIONS",
    "StartRequest",
    "StartResult",
    "listener",
    "own_options",
]

# Every option a caller may give a start or a pull's key question (the API's keywords; a start's model is its
# argument), with the flag that sets it on the command line: an engine takes its own and refuses the first other one in one line naming that flag.
START_OPTIONS = {
    "model": "--model",
    "device": "--device",
    "config": "--compilation-config",
    "overrides": "-cc.*",
    "rank": "--rank",
    "dp_rank": "--dp-rank",
    "tensor_parallel_size": "--tensor-parallel-size",
    "share_ranks": "share_ranks",
    "require_hit": "--require-hit",
    "engine_flags": "flags after --",
    "load_weights": "--load-weights",
}
# A start's listeners: every engine takes both and calls the one it has something for (the native engine its
# progress events, the others their message lines); a listener is no choice another engine could refuse.
LISTENERS = ("on_progress", "engine_progress")


def own_options(
    options: Mapping[str, Any], takes: Collection[str], refused: Callable[[str, str], str]
) -> dict[str, Any]:
    """``options`` (a caller's, only those it gave) that an engine ``takes``, the listeners dropped; the first
    other one raises a :class:`UsageError` whose line is ``refused(name, flag)``; a name that is no option at all,
    one naming it."""
    for name in options:
        if name not in START_OPTIONS and name not in LISTENERS:
            raise UsageError(f"unknown start option {name!r} ({', '.join((*START_OPTIONS, *LISTENERS))})")
    other = next((n for n in options if n not in takes and n not in LISTENERS), None)
    if other is not None:
        raise UsageError(refused(other, START_OPTIONS[other]))
    return {n: v for n, v in options.items() if n in takes}


def listener(options: Mapping[str, Any], name: str) -> Callable[[Any], None] | None:
    """The caller's listener ``name`` (``on_progress``, ``engine_progress``), or None."""
    return options.get(name)


class StartRequest(Protocol):
    """What every engine's own start request has (each is a frozen dataclass of its engine's module: its options,
    typed, each with its default there alone). The API reads only these; the engine reads the rest."""

    command: str  # "warm" or "check"
    cache_root: CacheRoot  # resolved once, when the request is parsed


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


class Engine(Protocol):
    """What every engine implements: who it is and its cache root, its start, its key question, its facts, its
    layout and its server's environment. The members only some engines have something for are
    :class:`EngineBase`'s."""

    name: str  # --engine
    summary: str  # one line for --engine's help: what it starts, and what it takes
    layout: str  # the bundle layout its cache trees pack as (a manifest's "layout")
    key_kinds: tuple[str, ...]  # the kinds of key folder its layout lists (a manifest's keys[].kind)
    cache_root_variable: str  # where its servers read the cache root from
    cache_root_default: str  # where they read it without the variable

    def start_request(
        self, command: str, model: str | None, cache_root: str | Path | None, options: Mapping[str, Any]
    ) -> StartRequest:
        """One start (``warm`` or ``check``) parsed into the engine's own frozen request: ``options`` are the
        caller's, only those it gave (:data:`START_OPTIONS`' names, and the :data:`LISTENERS`); another engine's
        option is refused in one line; the cache root is resolved once (``cache_root``, else the one the engine's
        configuration names, else its variable's, else its default: :class:`~cachetool.cache_root.CacheRoot`)."""
        ...

    def start(self, request: Any) -> StartResult:
        """Run a request :meth:`start_request` parsed (``check`` with ``require_hit``: a start that compiled raises
        a cache-miss error naming why)."""
        ...

    def key_request(self, cache_root: CacheRoot, device: str, timeout: float | None, options: Mapping[str, Any]) -> Any:
        """Pull's key question for a server (``model``, ``config``, ``overrides``, ``tensor_parallel_size``,
        ``engine_flags``: those the caller gave), parsed into the engine's own request; None where the options name
        no server (a pull without one asks no question); another engine's option refused in one line."""
        ...

    def key_check(self, request: Any) -> KeyCheck | None:
        """The answer to a :meth:`key_request`'s request, asked at the start of the pull (under its bound)."""
        ...

    def machine_facts(self, device: str | None) -> dict[str, str | None]:
        """Fingerprint fields beyond the common ones (``cachetool.bundle.fingerprint``) that its caches depend on."""
        ...

    def layout_rules(self) -> Any:
        """Its layout: a module with ``NAME``, ``detect(path)`` and ``scan(path)`` and, where it states them,
        ``incomplete_reason(unit_dir, ranked)`` and ``stale_entries(root)`` (:mod:`cachetool.engines.layouts`)."""
        ...

    def server_environment(self, root: Path) -> dict[str, str]:
        """The variables its server must be started with to read a cache installed at ``root`` (what ``pull``
        prints for the server's command, and ``check`` compares with the environment it runs in)."""
        ...


class EngineBase:
    """The members an engine states only where it has something to say, with what an engine that has nothing says;
    every engine extends it (its own module overrides what it states)."""

    variables: tuple[Any, ...] = ()  # the variables it reads beyond cachetool's registry (envs.EnvVar)
    fingerprint_fields: tuple[str, ...] = ()  # the fingerprint fields only its caches depend on (preflight compares)
    recorded_fields: tuple[str, ...] = ()  # fingerprint fields it records and nobody compares (the GPU driver)
    platform_fields: tuple[str, ...] = ()  # fingerprint fields its platform key names after the device (CPU ISA)
    local_by_server = False  # diff's "local" side: its server computes the key (needs its flags)
    loggers: tuple[str, ...] = ()  # the loggers whose lines a command shows on stderr (log_lines.py)

    def notice(self) -> str | None:
        """A line the user must read before a warm, pull or check does any work (vLLM: its release is outside
        the tested ones), or None."""
        return None

    def recognizes(self, fingerprint: dict) -> bool:
        """Whether a bundle of this fingerprint holds this engine's caches."""
        return False

    def platform_prefix(self, fingerprint: dict) -> str | None:
        """What leads the platform key of its bundles (``vllm0.32.0``), so that two engines' bundles of one machine
        sit side by side under one tag; None: nothing (:func:`cachetool.bundle.manifest.platform_key`)."""
        return None

    def check_factors(self, manifest: Any, device: str) -> list[str]:
        """The install preflight's own checks of a bundle's recorded factors against this machine (raises a
        ``PreflightError`` naming the first difference); what it checked."""
        return []

    def compare_keys(
        self, a: Factors | None, b: Factors | None, *, only: tuple[str, ...] | None = None, cache: str = ""
    ) -> list[Difference]:
        """Every field where two keys' recorded factors differ (``only``: these factors; None: all)."""
        from cachetool.facts.factor_compare import compare_keys

        return compare_keys(a, b, only=only, cache=cache)

    def key_lines(self, factors: Factors) -> list[str]:
        """A key folder's recorded factors in a few lines for ``inspect`` (what a server must be started with to
        use it, what built it); none where the factor hashes say all."""
        return []

    def local_factors(self, device: str) -> Factors | None:
        """The factors this machine would record without a model (diff's ``local``), or None."""
        return None

    def server_differences(
        self, keys: list[tuple[str, Factors | None]], model: str, flags: list[str], scratch: Path
    ) -> list[Difference]:
        """How the closest of a bundle's keys (``(folder name, recorded factors)``, as ``diff`` read them) differs
        from the key this engine's server computes."""
        raise UsageError(
            f"--model and flags after -- on diff are for an engine whose server computes its key; "
            f"--engine {getattr(self, 'name', '?')} compares this machine's facts "
            f"(diff BUNDLE local --engine {getattr(self, 'name', '?')})"
        )
