"""The one place the pipeline's errors become cachetool's: :class:`compiler.errors.CompilerError` carries a
``kind``, and each kind that a user can cause maps to one class of :mod:`cachetool.errors`; an error of another
kind is an unexpected failure and passes as it is. No cachetool module catches a compiler error by its class or
reads its message (tests/structure/)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from cachetool.errors import CachetoolError, CompilationConfigError, CompileInStrictModeError, ModelError
from compiler import errors as compiler_errors  # torch-free: the kinds the pipeline's errors carry

__all__ = ["KIND_TO_ERROR", "cachetool_error", "compiler_errors_mapped"]

KIND_TO_ERROR = {
    compiler_errors.STRICT_MODE: CompileInStrictModeError,
    compiler_errors.GUARDS: CompilationConfigError,  # evaluate_guards refused a batch the workload needs
    compiler_errors.CONFIG: CompilationConfigError,
    compiler_errors.MODEL: ModelError,
}


def cachetool_error(exc: BaseException, context: str = "") -> CachetoolError | None:
    """The cachetool error for the pipeline's error in ``exc`` or the exceptions it was raised from (Dynamo wraps a
    backend's error in its own: :func:`compiler.errors.find` looks through), chosen by its ``kind`` through
    :data:`KIND_TO_ERROR`, never by its class or message; None when there is none or its kind maps to nothing (an
    unexpected failure, reported as one). The message is the error's first line after ``context``."""
    found = compiler_errors.find(exc)
    mapped = KIND_TO_ERROR.get(found.kind) if found is not None else None
    if mapped is None:
        return None
    lines = str(found).splitlines()
    return mapped(f"{context}{lines[0] if lines else type(found).__name__}")


@contextlib.contextmanager
def compiler_errors_mapped(context: str = "") -> Iterator[None]:
    """Run the block with the pipeline's errors raised as :func:`cachetool_error`'s; anything else, and a kind
    that maps to nothing, passes unchanged."""
    try:
        yield
    except CachetoolError:
        raise
    except Exception as exc:
        mapped = cachetool_error(exc, context)
        if mapped is None:
            raise
        raise mapped from None
