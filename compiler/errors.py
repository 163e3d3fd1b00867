"""The compiler's error base: every error the pipeline raises on purpose is a :class:`CompilerError` with a ``kind``,
so that an embedder (``cachetool``) maps it by kind, never by its message. The classes live beside the code that
raises them (``CompileInStrictMode`` in counters.py, ``RecompileError`` in capture.py, ...); the kinds are here."""

from __future__ import annotations

STRICT_MODE = "strict-mode"  # something would compile while a pure cache hit was required
GUARDS = "guards"  # evaluate_guards refused a shape or a recompile the config does not allow
CONFIG = "config"  # the compilation config is not valid (unknown key, bad value, bad JSON)
MODEL = "model"  # the model is not a preset, config.json or folder, or its weights do not fit
AOT_ENTRY = "aot-entry"  # an AOT entry cannot be read or used
DISTRIBUTED = "distributed"  # process groups or a rank of a launch failed
INTERNAL = "internal"  # a broken invariant of the pipeline itself


class CompilerError(RuntimeError):
    """Base of the pipeline's errors; ``kind`` is one of the names above (a subclass sets its own, or an instance
    gets one where the same class serves several causes)."""

    kind = INTERNAL

    def __init__(self, message: str = "", *, kind: str | None = None):
        super().__init__(message)
        if kind is not None:
            self.kind = kind


def find(exc: BaseException | None) -> CompilerError | None:
    """The first :class:`CompilerError` in ``exc`` and the exceptions it was raised from (Dynamo wraps a backend's
    error in its own): how a caller finds the kind without reading messages."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, CompilerError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__ or getattr(exc, "inner_exception", None)
    return None
