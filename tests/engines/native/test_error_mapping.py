"""cachetool turns the pipeline's errors into its own in one place, by ``kind`` (compiler/errors.py,
``error_mapping.KIND_TO_ERROR``): ``error_mapping.cachetool_error`` / ``error_mapping.compiler_errors_mapped``
(cachetool/engines/native/error_mapping.py). The native warm and the native engine mapped ConfigError and ModelSpecError
by class at five sites, so an error of kind ``model`` or ``config`` from any other class (or one raised under
``traced_key``/``key_check`` where only ModelSpecError was caught) was an "unexpected" exit 1; the message never
decides.

The last tests run real failures of each mapped kind through the CLI's ``main`` and check the exit codes the
table gives them (strict mode 8, the rest usage 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cachetool import errors, exit_codes
from cachetool.engines.native import error_mapping
from cachetool.errors import CompileInStrictModeError
from compiler import errors as compiler_errors

# Each message names another kind's words: only the kind may decide.
ODD = "strict mode: unknown model 'x'; unknown compilation config key (a guard refused)\nsecond line"

EXPECTED = {
    compiler_errors.STRICT_MODE: (CompileInStrictModeError, exit_codes.COMPILED.code),
    compiler_errors.GUARDS: (errors.CompilationConfigError, exit_codes.USAGE.code),
    compiler_errors.CONFIG: (errors.CompilationConfigError, exit_codes.USAGE.code),
    compiler_errors.MODEL: (errors.ModelError, exit_codes.USAGE.code),
}
UNMAPPED = (compiler_errors.INTERNAL, compiler_errors.AOT_ENTRY, compiler_errors.DISTRIBUTED)


class OddError(compiler_errors.CompilerError):
    """Not one of the classes the native warm used to catch: only its kind says what it is."""


def test_every_mapped_kind_is_expected_here():
    assert set(error_mapping.KIND_TO_ERROR) == set(EXPECTED)


def test_the_native_engine_maps_kinds_not_messages():
    assert error_mapping.KIND_TO_ERROR[compiler_errors.STRICT_MODE] is CompileInStrictModeError
    assert issubclass(error_mapping.KIND_TO_ERROR[compiler_errors.GUARDS], errors.CompilationConfigError)


@pytest.mark.parametrize("kind", sorted(EXPECTED))
@pytest.mark.parametrize("wrapped", [False, True], ids=["raised", "wrapped-by-dynamo"])
def test_the_kind_picks_the_error_not_the_class_or_message(kind, wrapped):
    cls, code = EXPECTED[kind]
    with pytest.raises(cls) as err:
        with error_mapping.compiler_errors_mapped("warm: "):
            try:
                raise OddError(ODD, kind=kind)
            except OddError as exc:
                if not wrapped:
                    raise
                raise RuntimeError("backend compiler failed") from exc  # as Dynamo wraps a backend's error
    assert type(err.value) is cls and err.value.exit_code == code
    assert (
        err.value.message == "warm: strict mode: unknown model 'x'; unknown compilation config key (a guard refused)"
    )  # the first line, after the context


@pytest.mark.parametrize("kind", UNMAPPED)
def test_a_kind_with_no_mapping_passes_unchanged(kind):
    raised = OddError(ODD, kind=kind)
    with pytest.raises(OddError) as err:
        with error_mapping.compiler_errors_mapped():
            raise raised
    assert err.value is raised
    assert error_mapping.cachetool_error(raised) is None


def test_other_errors_and_cachetool_errors_pass_unchanged():
    assert error_mapping.cachetool_error(RuntimeError("strict mode")) is None  # the text alone says nothing
    already = errors.ModelError("unknown model 'x'")
    for exc in (RuntimeError("strict mode"), already):
        with pytest.raises(type(exc)) as err:
            with error_mapping.compiler_errors_mapped("check: "):
                raise exc
        assert err.value is exc


def test_an_empty_message_names_the_class():
    assert error_mapping.cachetool_error(OddError("", kind=compiler_errors.MODEL)).message == "OddError"


# ------------------------------------------------------------------------- real failures through the CLI


@pytest.fixture()
def cli(capsys):
    """``cachetool.cli.main`` in this process: (exit code, its ``error:`` lines on stderr; a compiling start logs
    INFO lines there too); the loggers it sets up are restored."""
    import logging

    from cachetool.cli import main

    saved = {
        n: (lg.handlers[:], lg.propagate, lg.level) for n in ("compiler", "cachetool") for lg in [logging.getLogger(n)]
    }

    def run(*argv: str) -> tuple[int, list[str]]:
        code = main(list(argv))
        return code, [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error")]

    yield run
    for n, (handlers, propagate, level) in saved.items():
        lg = logging.getLogger(n)
        lg.handlers[:], lg.propagate = handlers, propagate
        lg.setLevel(level)


def test_a_config_error_saying_strict_mode_is_a_usage_error(cli, tmp_path: Path):
    code, lines = cli("warm", "--model", "tiny", "--cache-root", str(tmp_path / "root"), "-cc.strict_mode=1")
    assert code == exit_codes.USAGE.code and len(lines) == 1, lines
    assert lines[0].startswith("error: unknown compilation config key 'strict_mode'"), lines


def test_a_model_error_is_a_usage_error(cli, tmp_path: Path):
    code, lines = cli("check", "--model", str(tmp_path / "no-such-model"), "--cache-root", str(tmp_path / "root"))
    assert code == exit_codes.USAGE.code and len(lines) == 1 and "unknown model" in lines[0], lines


def test_a_guard_refused_at_trace_is_the_configs(cli, tmp_path: Path):
    code, lines = cli(
        "warm",
        "--model",
        "tiny",
        "--cache-root",
        str(tmp_path / "root"),
        "-cc.dynamic_shapes_config.type=backed_size_oblivious",
        "-cc.dynamic_shapes_config.evaluate_guards=true",
    )
    assert code == exit_codes.USAGE.code and len(lines) == 1, lines
    assert lines[0].startswith("error: warm: evaluate_guards: tracing added guards on dynamic shapes"), lines


def test_a_compile_under_require_hit_is_exit_8(cli, tmp_path: Path):
    code, lines = cli("check", "--model", "tiny", "--cache-root", str(tmp_path / "root"), "--require-hit")
    assert code == exit_codes.COMPILED.code and len(lines) == 1 and lines[0].startswith("error: check: "), lines
