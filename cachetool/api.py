"""The Python API: the operations of the CLI as functions returning typed results.

For servers and pipelines that embed cachetool instead of shelling out::

    import cachetool
    summary = cachetool.warm("llama-3.2-1b", device="cuda", cache_root="/cache",
                             push="s3://bucket/bundles/llama:main", sign_key="/keys/signing.key")
    result = cachetool.pull("s3://bucket/bundles/llama:main", "/cache", trust=["/keys/signing.pub"],
                            model="llama-3.2-1b", device="cuda")

Every verb of the CLI is a function here, and the CLI only renders what it returns. Every failure raises a
:class:`cachetool.errors.CachetoolError` subclass (the CLI maps each to its exit code), except
:func:`pull_outcome`, which returns the outcome of a pull under the init-container policy.
torch is imported only by the calls that compile or compute a cache key.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetool import engines
from cachetool.cache_root import CacheRoot
from cachetool.engines import CHOICES as ENGINE_CHOICES  # noqa: F401 - for the CLI (CLI_NAMES)
from cachetool.engines.base import StartRequest, StartResult
from cachetool.errors import CompilationConfigError, UsageError  # noqa: F401 - for the CLI (CLI_NAMES)
from cachetool.stores.base import GC_MIN_AGE_S  # noqa: F401 - for the CLI (CLI_NAMES)
from cachetool.transfer.pull_policy import ON_MISS, OnMiss, Outcome, PullOutcome, failure_outcome  # noqa: F401 - ON_MISS: for the CLI

if TYPE_CHECKING:
    from cachetool.bundle.packing import PackedBundle
    from cachetool.stores.base import Store
    from cachetool.transfer.pull import NotNeeded, PullRequest, PullResult
    from cachetool.transfer.push import PushResult

__all__ = [
    "WarmSummary",
    "warm",
    "check",
    "push",
    "pull",
    "pull_outcome",
    "expected_cache_key",
    "compilation_config",
    "pack",
    "keygen",
    "sign",
    "inspect",
    "verify",
    "install",
    "diff",
    "ls",
    "rm",
    "gc",
    "prune",
]

# What the CLI renders and parses with, besides __all__ (whose names are also cachetool's top-level ones): the CLI
# imports from this module only (tests/structure/test_cli_layer.py), these names included.
CLI_NAMES = (
    "CompilationConfigError",
    "PullOutcome",
    "PULL_OUTCOMES",
    "ENGINE_CHOICES",
    "ENGINE_HELP",
    "CACHE_ROOT_HELP",
    "DEFAULT_CACHE_ROOT_HELP",
    "ON_MISS",
    "GC_MIN_AGE_S",
    "layout_choices",
    "init_logging",
    "start_request",
    "pull_request",
    "pull_refused_outcome",
)
PULL_OUTCOMES: tuple[Outcome, ...] = tuple(Outcome)  # every outcome a pull ends in (`pull --help` lists them)
ENGINE_HELP = engines.help_text()  # --engine's help, from the registry
CACHE_ROOT_HELP = f"Cache root (default: {engines.cache_root_help()})."  # verbs with --engine
DEFAULT_CACHE_ROOT_HELP = f"Cache root (default: {engines.cache_root_help(every_engine=False)})."  # verbs without

# The argument types the verbs share.
from cachetool.bundle_verbs import SignKey  # noqa: E402 - the key type of every verb that signs

Config = Any  # the native engine's compilation config: a CompilationConfig, a dict, a JSON string, or None


@dataclass
class WarmSummary:
    """``warm`` with an optional push: what compiled, what was packed, where it went, and how long each took."""

    compile: StartResult
    push: PushResult | None = None  # when pushed
    bytes_raw: int | None = None  # files in the pushed cache folder
    bytes_unique: int | None = None  # after deduplicating identical files
    bytes_compressed: int | None = None  # zstd blobs + manifest, what a store holds: to_json's "stored", ls's size
    phases: dict[str, float] = field(default_factory=dict)  # seconds: warm (the whole run), pack, push

    def to_json(self) -> dict[str, Any]:
        return {
            "compile": self.compile.to_json(),
            "push": self.push.to_json() if self.push is not None else None,
            "bytes": {"raw": self.bytes_raw, "unique": self.bytes_unique, "stored": self.bytes_compressed},
            "phases": self.phases,
            # the fields CI scripts read most, at the top level too
            "graphs_compiled": self.compile.graphs_compiled,
            "graphs_loaded": self.compile.graphs_loaded,
            "cache_dir": self.compile.cache_dir,  # type: ignore[attr-defined]  # baseline (issue 46)
            "seconds": round(sum(self.phases.values()), 3),
            "ref": self.push.ref if self.push is not None else None,
            "manifest_digest": self.push.manifest_digest if self.push is not None else None,
        }


def _push_key(push: str | None, sign_key: SignKey | None, store_options: dict[str, Any] | None) -> SignKey | None:
    """Check ``push``, its store options and load ``sign_key`` before minutes of compiling, not after; the loaded
    key."""
    if push is None:
        return sign_key
    from cachetool.stores import checked_options
    from cachetool.stores.addresses import parse_ref

    checked_options(parse_ref(push).store, store_options or {})
    if sign_key is None:
        raise UsageError("--push needs --sign-key: pulls verify signatures by default")
    if isinstance(sign_key, (str, Path)):
        from cachetool.bundle.signing import load_private_key

        sign_key = load_private_key(sign_key)
    return sign_key


def _engine(name: str | None) -> engines.Engine:
    return engines.get(name) if name is not None else engines.default()


def _native() -> Any:
    """The default engine, this project's pipeline, for what the API offers of it alone (its compilation config,
    its traced key, install's key check)."""
    return engines.default()


def compilation_config(
    config: Config = None, overrides: Iterable[str] = (), cache_root: str | Path | None = None
) -> Any:
    """The pipeline's ``CompilationConfig``: ``config`` (one, a dict, JSON, or None) with ``-cc.KEY=VALUE``
    ``overrides`` (``cache_root`` sets its ``cache_dir``); a bad value is a
    :class:`~cachetool.errors.CompilationConfigError`."""
    return _native().compilation_config(config, tuple(overrides), cache_root)


@dataclass(frozen=True)
class Start:
    """One start settled once (:func:`start_request`): its engine and the engine's own request; the CLI builds it
    and hands it to :func:`warm` or :func:`check` in place of their ``model``."""

    engine: engines.Engine
    request: StartRequest


def start_request(
    command: str,
    model: str | None = None,
    cache_root: str | Path | None = None,
    *,
    engine: str | None = None,
    **options: Any,
) -> Start:
    """One start of ``engine`` (default: the native engine), parsed by that engine into its own frozen request
    (``Engine.start_request``): ``options`` are those the caller gives, by the names of
    :data:`cachetool.engines.base.START_OPTIONS`, and the listeners ``on_progress`` (the native engine's progress
    events) and ``engine_progress`` (another engine's message lines); each default is the engine's request's. An
    engine refuses another engine's option in one line. The root is ``cache_root``, else the one the engine's
    configuration names (the native engine's ``-cc.cache_dir``), else the engine's variable's, else its default."""
    chosen = _engine(engine)
    return Start(chosen, chosen.start_request(command, model, cache_root, options))


def _settled_start(
    command: str, model: str | Start | None, cache_root: str | Path | None, engine: str | None, options: dict[str, Any]
) -> Start:
    """``model``'s start, or ``model`` itself when it is one (:func:`start_request`'s, as the CLI builds it)."""
    if not isinstance(model, Start):
        return start_request(command, model, cache_root, engine=engine, **options)
    if cache_root is not None or engine is not None or options:
        raise UsageError("a Start is settled: give its options to start_request, not with it")
    if model.request.command != command:
        raise UsageError(f"a {model.request.command} start given to {command}")
    return model


def warm(
    model: str | Start | None = None,
    *,
    cache_root: str | Path | None = None,
    push: str | None = None,
    sign_key: SignKey | None = None,
    store_options: dict[str, Any] | None = None,
    progress: bool | None = False,
    engine: str | None = None,
    timeout: float | None = None,
    **options: Any,
) -> WarmSummary:
    """Compile ``model`` as a server would, filling the cache root (:class:`~cachetool.cache_root.CacheRoot`:
    ``cache_root``, else the engine's variable, else its default); with ``push``, pack what the start wrote
    (signed with ``sign_key``) and push it to that ref. ``options``: the start's (:func:`start_request`; their
    defaults are the engine's request's). The native engine (the default) takes ``device``,
    ``config``/``overrides``, ``rank``, ``dp_rank``, ``tensor_parallel_size``, ``share_ranks`` and
    ``on_progress`` (its progress events); ``engine="vllm"`` starts real vLLM headless with ``engine_flags``
    (``vllm serve`` flags, read by vLLM's own parser; ``load_weights`` reads the model's weights instead of dummy
    ones; ``engine_progress`` gets its message lines); ``engine="torch"`` runs the program in ``engine_flags``.
    An engine refuses another engine's options in one line.
    ``model`` may instead be a :class:`Start` that :func:`start_request` built (the CLI's). ``timeout`` (seconds)
    bounds the whole warm, push included: past it every process the warm started is ended and
    :class:`~cachetool.errors.WaitTimeoutError` (exit 7) names the phase it was in."""
    from cachetool.writable_root import require_writable

    sign_key = _push_key(push, sign_key, store_options)
    start = _settled_start("warm", model, cache_root, engine, options)
    request, root = start.request, start.request.cache_root
    t0 = time.perf_counter()
    require_writable(root, "warm")  # before minutes of compiling
    with _start_stopped_by_signals("warm", root, timeout):
        result = start.engine.start(request)
        summary = WarmSummary(compile=result, phases={"warm": round(time.perf_counter() - t0, 3)})
        if push is not None:
            _pack_and_push(summary, result.pack_folder(), push, sign_key, store_options, progress)
    return summary


def _start_stopped_by_signals(command: str, root: CacheRoot, timeout: float | None) -> AbstractContextManager[Any]:
    """A start (``warm``, ``check``) that SIGINT, SIGTERM or its ``timeout`` ends cleanly
    (:mod:`cachetool.stop_signals`): every process it started ended, :class:`~cachetool.errors.StopSignalError`
    (exit 130; a timeout: :class:`~cachetool.errors.WaitTimeoutError`, exit 7) naming what is left of the root:
    a root the start created is removed (every engine does), what it left unfinished in one that was there is
    refused by ``pack`` (the engine's layout says what is unfinished)."""
    from cachetool.stop_signals import stopped_by_signals

    return stopped_by_signals(
        lambda cause: f"{command} stopped by {cause}: every process it started is ended; {_left_of_root(root.path)}",
        timeout,
    )


def _left_of_root(path: Path) -> str:
    """What a stopped start left of its root, as it is once the start has cleaned up: only what exists is named."""
    if path.exists():
        return f"pack refuses what it left unfinished in {path} until a warm completes"
    return f"the cache root {path} it created is removed"


def _pack_and_push(
    summary: WarmSummary,
    folder: Path,
    push: str,
    sign_key: SignKey | None,
    store_options: dict[str, Any] | None,
    progress: bool | None,
) -> None:
    from cachetool.bundle.packing import pack
    from cachetool.transfer.push import push as push_bundle

    t1 = time.perf_counter()
    with pack(folder, sign_key=sign_key) as bundle:
        summary.phases["pack"] = round(time.perf_counter() - t1, 3)
        summary.bytes_raw = bundle.manifest.raw_size
        summary.bytes_unique = bundle.manifest.unique_size
        summary.bytes_compressed = bundle.stored_size
        t2 = time.perf_counter()
        summary.push = push_bundle(bundle, push, store_options=store_options, progress=progress)
        summary.phases["push"] = round(time.perf_counter() - t2, 3)


def check(
    model: str | Start | None = None,
    *,
    cache_root: str | Path | None = None,
    engine: str | None = None,
    timeout: float | None = None,
    **options: Any,
) -> StartResult:
    """Start ``model`` as a server would and report compiled vs loaded graphs (the engine's
    :class:`~cachetool.engines.base.StartResult`; options as for :func:`warm`, and ``require_hit``). ``require_hit``: the native engine
    raises :class:`cachetool.errors.CompileInStrictModeError` before anything compiles; vLLM raises
    :class:`cachetool.errors.EngineMissError` (exit 4) naming why, after the start, with the start as its
    ``start`` (what the CLI's ``--json`` object of the failure carries). ``model`` may instead be a :class:`Start`.
    ``timeout``: as for :func:`warm`."""
    start = _settled_start("check", model, cache_root, engine, options)
    with _start_stopped_by_signals("check", start.request.cache_root, timeout):
        return start.engine.start(start.request)


def expected_cache_key(
    model: str,
    *,
    device: str = "cpu",
    config: Config = None,
    overrides: list[str] | tuple[str, ...] = (),
    rank: int = 0,
    dp_rank: int = 0,
) -> dict:
    """The cache key (``{"hash", "factors"}``) a server of the native engine running ``model`` with this config
    will look up, computed by a Dynamo trace without compiling or writing anything."""
    return _native().traced_key(
        model, device=device, config=compilation_config(config, overrides), rank=rank, dp_rank=dp_rank
    )


def push(
    source: str | Path | PackedBundle,
    ref: str,
    *,
    sign_key: SignKey | None = None,
    layout: str = "auto",
    store: Store | None = None,
    store_options: dict[str, Any] | None = None,
    workers: int = 8,
    progress: bool | None = None,
) -> PushResult:
    """Push a ``.ctb`` file, a packed bundle or a cache folder (packed with ``layout`` and signed on the way) to
    ``ref``, through ``store`` or the ref's store opened with ``store_options``; returns
    :class:`cachetool.transfer.push.PushResult` (blobs uploaded vs already in the store)."""
    from cachetool.transfer.push import push as push_bundle

    return push_bundle(
        source,
        ref,
        sign_key=sign_key,
        layout=layout,
        store=store,
        store_options=store_options,
        workers=workers,
        progress=progress,
    )


def default_cache_root(engine: str | None = None) -> Path:
    """Where the server of ``engine`` (default: the native engine's) reads its cache, so where a pull puts it: the
    engine's variable (``CACHETOOL_CACHE_ROOT``, ``VLLM_CACHE_ROOT``), else its default."""
    return CacheRoot.of(None, _engine(engine)).path  # type: ignore[arg-type]  # baseline (issue 46)


# A pull's keywords that name the server (its key question, which its engine parses: Engine.key_request); the
# question's device and timeout are the pull's own.
KEY_OPTIONS = ("model", "config", "overrides", "tensor_parallel_size", "engine_flags")


def pull_request(
    ref: str, cache_root: str | Path | None = None, *, engine: str | None = None, **options: Any
) -> PullRequest:
    """A pull's every option settled into one frozen :class:`cachetool.transfer.pull.PullRequest` (the options as
    for :func:`pull`): the engine, the cache root, and the server's key question, the engine's own request, when
    the options name one (``model``, ``config``, ``overrides``, ``tensor_parallel_size``, ``engine_flags``: those
    the caller gives; another engine's is refused in one line). The options' defaults are the request's own (its
    :class:`~cachetool.install.options.InstallOptions` and its store's fields)."""
    from cachetool.transfer.pull import PullRequest

    chosen = _engine(engine)
    root = CacheRoot.of(cache_root, chosen)  # type: ignore[arg-type]  # baseline (issue 46)
    named = {k: options.pop(k) for k in list(options) if k in KEY_OPTIONS}
    key_request = chosen.key_request(root, options.get("device") or "cpu", options.get("timeout"), named)
    return PullRequest(ref=ref, cache_root=root, engine=chosen, key_request=key_request, **options)  # type: ignore[arg-type]  # baseline (issue 46)


def _settled(ref: str | PullRequest, cache_root: str | Path | None, options: dict[str, Any]) -> PullRequest:
    """``ref``'s request, or ``ref`` itself when it is one (:func:`pull_request`'s, as the CLI builds it)."""
    from cachetool.transfer.pull import PullRequest

    if not isinstance(ref, PullRequest):
        return pull_request(ref, cache_root, **options)
    if cache_root is not None or options:
        raise UsageError("a PullRequest is settled: give its options to pull_request, not with it")
    return ref


def pull(ref: str | PullRequest, cache_root: str | Path | None = None, **options: Any) -> PullResult | NotNeeded:
    """Pull ``ref`` into ``cache_root`` (default: :func:`default_cache_root` of ``engine``): signature checked
    against the pinned keys, then preflight, then blobs, each verified, installed atomically. With ``model`` (and
    ``config``, ``tensor_parallel_size``; for ``engine="vllm"`` the server's flags as ``engine_flags``), preflight
    also asks the engine which key folder this server will look up, naming a differing config field or traced
    file. A server that compiles no graph (``--enforce-eager``, ``-O0``) gets only the bundle's folders that belong
    to no key (vLLM's Triton kernels and model inspection, which an eager start needs too). Returns
    :class:`cachetool.transfer.pull.PullResult`, or :class:`cachetool.transfer.pull.NotNeeded` where such a
    server reads nothing of the bundle; raises on failure. ``options``: the install's
    (:class:`~cachetool.install.options.InstallOptions`: ``trust``, ``insecure_skip_verify``, ``ranks``,
    ``device``, ``preflight``, ``force``, ``keep_changed``, ``warn``, ``workers``), the store's (``store``,
    ``store_options``, ``timeout``, ``progress``), ``engine`` and the server's (above); or ``ref`` is a request
    :func:`pull_request` built."""
    from cachetool.transfer.pull import pull as run_pull

    return run_pull(_settled(ref, cache_root, options))


def pull_outcome(
    ref: str | PullRequest, cache_root: str | Path | None = None, *, on_miss: OnMiss = "fail", **options: Any
) -> PullOutcome:
    """:func:`pull` under the init-container policy (:mod:`cachetool.transfer.pull_policy`): returns a
    :class:`cachetool.transfer.pull_policy.PullOutcome` whatever happens (``installed``, ``already-installed``, or the
    failure's outcome and exit code; ``on_miss="continue"`` gives exit 0 for a cache that is missing, stale,
    unreachable, slow or refused), with the read-only-root temporary folder and the hard ``timeout`` applied.
    The other arguments as for :func:`pull`."""
    from cachetool.transfer.pull_policy import pull_with_policy

    try:
        request = _settled(ref, cache_root, options)
    except Exception as exc:  # an engine that is none, an option that is none: its outcome too
        return failure_outcome(str(ref), on_miss, exc)
    return pull_with_policy(request, on_miss)


def pull_refused_outcome(ref: str | None, exc: BaseException, on_miss: str = "fail") -> PullOutcome:
    """The outcome of a pull refused before it ran (a flag the CLI could not take), under the same policy."""
    return failure_outcome(ref, on_miss, exc)


# ---------------------------------------------------------------------------------------- bundles and stores
from cachetool.bundle_verbs import diff, inspect, install, keygen, pack, sign, verify  # noqa: E402 - verbs
from cachetool.store_verbs import gc, ls, prune, rm  # noqa: E402 - verbs


# -------------------------------------------------------------------------------------- what the CLI sets up
def layout_choices() -> tuple[str, ...]:
    """``--layout``'s choices: ``auto`` and every layout (:data:`cachetool.engines.layouts.CHOICES`)."""
    from cachetool.engines.layouts import CHOICES

    return tuple(CHOICES)


def init_logging() -> None:
    """Log lines of the compiler and of cachetool on stderr, at ``CACHETOOL_LOGGING_LEVEL`` (what ``warm`` and
    ``check`` show while they run; an embedder configures its own logging instead)."""
    engines.init_logging()
