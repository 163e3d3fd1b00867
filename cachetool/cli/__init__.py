"""The ``cachetool`` command: a thin layer over the library API.

Each command group lives in its own module and registers itself on :data:`cli` (:mod:`cachetool.cli.group`). Every
failure becomes one ``error: ...`` line on stderr (and, with ``--json``, one JSON object on stdout:
:mod:`cachetool.cli.output`) and an exit code from the one table, :mod:`cachetool.exit_codes`; no traceback reaches
the user.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import traceback

import click

from cachetool import exit_codes
from cachetool.cli import output
from cachetool.cli.group import EXIT_WITHOUT_JOINING, cli
from cachetool.errors import CachetoolError, os_error_line

__all__ = ["cli", "main", "entry", "EXIT_WITHOUT_JOINING"]


def _load_commands() -> None:
    """The command modules, each of which adds its commands to :data:`cli` (imported when a call runs, not when the
    package is imported)."""
    from cachetool.cli import bundle_cmds, compile_cmds, store_cmds  # noqa: F401 - they register their commands


def main(argv: list[str] | None = None) -> int:
    """Run one ``cachetool`` call; every failure, whatever raised it, is one ``error:`` line (and, with
    ``--json``, one JSON object) and an exit code from :mod:`cachetool.exit_codes`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    output.begin(argv)
    _load_commands()
    try:
        _check_environment(argv)
        rv = cli.main(args=argv, prog_name="cachetool", standalone_mode=False)
    except CachetoolError as exc:
        return output.fail(exc.message or type(exc).__name__, exc.exit_code, exc)
    except click.exceptions.Abort:  # Ctrl-C outside a verb's own handling (pull stops on signals itself)
        return output.fail("interrupted (SIGINT)", exit_codes.INTERRUPTED.code)
    except click.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `cachetool`: show the help, as click does
            exc.show()
            return exc.exit_code
        # Click's own report is three lines (Usage, Try, Error); bad input here is always one line.
        return output.fail(f"{exc.format_message()} (see `cachetool --help`)", exit_codes.USAGE.code)
    except click.ClickException as exc:
        return output.fail(exc.format_message(), exit_codes.USAGE.code)
    except OSError as exc:  # a file system or socket failure no verb mapped
        return output.fail(os_error_line(exc, output.command() or "cachetool"), exit_codes.for_os_error(exc).code, exc)
    except Exception as exc:  # a bug: still one line, the traceback only where asked for
        if _debug():
            traceback.print_exc()
        hint = "" if _debug() else f" (set {_DEBUG_VARIABLE}=DEBUG for the traceback)"
        return output.fail(f"unexpected {type(exc).__name__}: {_first_line(exc)}{hint}", exit_codes.ERROR.code)
    # With standalone_mode=False click returns ctx.exit()'s code, or the command's return value.
    return rv if isinstance(rv, int) else 0


_DEBUG_VARIABLE = "CACHETOOL_LOGGING_LEVEL"


def _debug() -> bool:
    from cachetool import envs

    return str(envs.get(_DEBUG_VARIABLE)).strip().upper() == "DEBUG"


def _check_environment(argv: list[str]) -> None:
    """A variable every call reads that holds no value it takes is a usage error before any verb runs (a logging
    level of LOUD was taken silently as INFO); ``--help`` and ``--version`` still answer."""
    from cachetool import envs

    if not {"-h", "--help", "--version"} & set(argv[: argv.index("--")] if "--" in argv else argv):
        envs.logging_level()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0]


def entry() -> None:
    rc = main()
    if rc == exit_codes.INTERRUPTED.code:
        _exit_stopped(rc)
    if EXIT_WITHOUT_JOINING.is_set():
        _exit_now(rc)
    sys.exit(rc)


def _exit_stopped(rc: int) -> None:
    """A stopped verb has ended its processes and said so: the exit that was asked for, now. The interpreter's last
    garbage collection of what torch and Dynamo built would only delay it, and its finalization has extensions
    (Triton's nanobind module) report every object still alive as leaked, noise after a clean stop. So objects now
    alive are frozen (no collection walks them), the exit handlers still run (logging's flush, temporary files),
    the standard streams are flushed, and the process ends without finalizing."""
    gc.freeze()
    atexit._run_exitfuncs()  # what sys.exit would run; os._exit runs none
    _exit_now(rc)


def _exit_now(rc: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
