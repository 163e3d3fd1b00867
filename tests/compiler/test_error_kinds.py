"""The compiler's errors say their kind (compiler/errors.py), so that cachetool maps the kind, not the message
(the native warm sorted them by 'strict mode' in their text): tests/engines/native/test_error_mapping.py tests
the mapping."""

from __future__ import annotations

from compiler import errors
from compiler.capture import RecompileError
from compiler.counters import CompileInStrictMode
from compiler.piecewise_backend import DynamicShapeGuardError


def test_every_error_of_the_pipeline_has_a_kind():
    assert CompileInStrictMode("x").kind == errors.STRICT_MODE
    assert DynamicShapeGuardError("x").kind == errors.GUARDS
    assert RecompileError("x").kind == errors.GUARDS
    assert RecompileError("x", kind=errors.STRICT_MODE).kind == errors.STRICT_MODE
    assert all(
        issubclass(c, errors.CompilerError) for c in (CompileInStrictMode, DynamicShapeGuardError, RecompileError)
    )


def test_find_looks_through_the_errors_dynamo_wraps_ours_in():
    inner = CompileInStrictMode("strict mode: piece 2 would compile")
    try:
        try:
            raise inner
        except CompileInStrictMode as exc:
            raise RuntimeError("backend compiler failed: something else entirely") from exc
    except RuntimeError as wrapped:
        assert errors.find(wrapped) is inner
    assert errors.find(RuntimeError("strict mode")) is None  # the text alone says nothing


def test_the_pipelines_runtime_errors_share_the_base():
    from compiler.aot_entry import AotEntryError
    from compiler.cuda_graph import MissingGraphError
    from compiler.distributed.launch import RankFailed
    from compiler.distributed.parallel_state import ParallelStateError

    kinds = {c: c.kind for c in (AotEntryError, MissingGraphError, RankFailed, ParallelStateError)}
    assert all(issubclass(c, errors.CompilerError) for c in kinds)
    assert kinds[AotEntryError] == errors.AOT_ENTRY and kinds[RankFailed] == errors.DISTRIBUTED
