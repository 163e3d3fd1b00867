"""The engine registry and the layout table: every engine, and every layout a bundle may name, found from the
engines that declare them (imported by :mod:`cachetool.engines`, which hands both to the core, and by
:mod:`cachetool.engines.layouts`, whose rules read the table; a module of its own, so neither imports the other's
package half-initialised).

``native`` is this project's pipeline (:mod:`cachetool.engines.native`), ``vllm`` is real vLLM run headless in a
child process (:mod:`cachetool.engines.vllm`), ``torch`` is any torch.compile program, the user's own command
(:mod:`cachetool.engines.torch`). Each is an :class:`~cachetool.engines.base.Engine`. This registry is how the rest
of cachetool reaches one, never by naming it: :func:`get` (by ``--engine``), :func:`for_layout` (by a bundle's
layout), :func:`for_fingerprint` (by what a bundle's fingerprint records), :func:`default` (a pull or a warm that
names none); and what engines declare is read here (their layouts, fields, variables, help).

:data:`LAYOUTS` maps every name a manifest may carry to its layout module (``Engine.layout`` names it,
``Engine.layout_rules()`` returns it), in detection order (the engines' registry order, the most specific first,
then ``triton``, the one layout no engine writes: a plain Triton cache folder, :mod:`cachetool.layouts.triton`).
A new engine's layout needs nothing here.
"""

from __future__ import annotations

from cachetool.engines.base import Engine
from cachetool.engines.native import NativeEngine
from cachetool.engines.torch import TorchEngine
from cachetool.engines.vllm import VllmEngine
from cachetool.errors import UsageError
from cachetool.layouts import triton

# The most specific first: for_fingerprint takes the first engine that recognizes a bundle (native takes any).
ENGINES: dict[str, Engine] = {e.name: e for e in (VllmEngine(), TorchEngine(), NativeEngine())}  # type: ignore[misc]  # baseline (issue 46)
DEFAULT = "native"  # the server a verb that names no --engine is for: this project's
CHOICES = (DEFAULT, *(n for n in ENGINES if n != DEFAULT))
LAYOUTS = {**{e.layout: e.layout_rules() for e in ENGINES.values()}, triton.NAME: triton}

__all__ = [
    "CHOICES",
    "DEFAULT",
    "ENGINES",
    "LAYOUTS",
    "cache_root_help",
    "common_facts",
    "default",
    "fields_ignored_by",
    "for_fingerprint",
    "for_layout",
    "get",
    "help_text",
    "init_logging",
    "machine_fingerprint",
]


def get(name: str) -> Engine:
    try:
        return ENGINES[name]
    except KeyError:
        raise UsageError(f"unknown engine {name!r} ({', '.join(CHOICES)})") from None


def default() -> Engine:
    return ENGINES[DEFAULT]


def for_layout(layout: str | None) -> Engine:
    """The engine whose caches a bundle of ``layout`` holds (a Triton-only bundle: the default engine's rules)."""
    return next((e for e in ENGINES.values() if e.layout == layout), default())


def for_fingerprint(fingerprint: dict | None) -> Engine:
    """The engine whose server reads a bundle with this fingerprint."""
    return next(e for e in ENGINES.values() if e.recognizes(fingerprint or {}))  # type: ignore[attr-defined]  # baseline (issue 46)


def fields_ignored_by(engine: Engine) -> tuple[str, ...]:
    """Fingerprint fields only other engines' caches depend on (a native cache loads the same beside any vLLM)."""
    return tuple(
        f
        for e in ENGINES.values()
        if e is not engine
        for f in e.fingerprint_fields  # type: ignore[attr-defined]  # baseline (issue 46)
        if f not in engine.fingerprint_fields  # type: ignore[attr-defined]  # baseline (issue 46)
    )


def help_text() -> str:
    """``--engine``'s help: each engine's one line, the default first."""
    return "; ".join(f"{name}: {ENGINES[name].summary}" for name in CHOICES) + "."


def cache_root_help(every_engine: bool = True) -> str:
    """``--cache-root``'s default in words: the default engine's variable and default, then (for verbs with
    ``--engine``) each other engine's."""
    first, *others = (ENGINES[name] for name in CHOICES)
    return "; ".join(
        [
            f"{first.cache_root_variable} or {first.cache_root_default}",
            *(
                f"with --engine {e.name}: {e.cache_root_variable} or {e.cache_root_default}"
                for e in others
                if every_engine
            ),
        ]
    )


def init_logging() -> None:
    """Log lines of cachetool and of every engine's loggers on stderr, at ``CACHETOOL_LOGGING_LEVEL``."""
    from cachetool.log_lines import init_logging as to_stderr

    to_stderr(name for engine in ENGINES.values() for name in engine.loggers)  # type: ignore[attr-defined]  # baseline (issue 46)


def common_facts(device: str | None = None) -> dict:
    """The fingerprint fields every engine's caches depend on, as this machine has them (read without torch)."""
    from cachetool.facts.machine import common_facts as read

    return read(device)


def machine_fingerprint(engine: Engine, device: str | None = None) -> dict:
    """This machine's fingerprint as a server of ``engine`` has it: the common facts and the engine's own (what a
    bundle of that engine recorded, and what the install preflight and ``diff`` compare it with)."""
    fp = common_facts(device)
    fp.update(engine.machine_facts(fp["device"]))
    return fp
