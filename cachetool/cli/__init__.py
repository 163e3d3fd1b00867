"""The ``cachetool`` command: a thin layer over the library API.

Each command group lives in its own module and registers itself on :data:`cli`. Library errors
(:class:`cachetool.errors.CachetoolError`) become one ``error: ...`` line on stderr and the error's exit code.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading

import click

from cachetool import __version__
from cachetool.errors import CachetoolError

# Set by a command that abandoned worker threads blocked in I/O (pull past its hard --timeout): the process then
# exits at once with its code instead of joining threads stuck in a socket read for minutes.
EXIT_WITHOUT_JOINING = threading.Event()

# Modules that add commands to `cli`; each imports `cli` from here and decorates its commands.
_COMMAND_MODULES = (
    "cachetool.cli.compile_cmds",
    "cachetool.cli.bundle_cmds",
    "cachetool.cli.store_cmds",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="cachetool")
def cli() -> None:
    """Warm, bundle, sign, push and pull torch.compile caches."""


def _load_commands() -> None:
    for name in _COMMAND_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            # A command module not written yet must not break the others.
            if exc.name != name:
                raise


def main(argv: list[str] | None = None) -> int:
    _load_commands()
    try:
        rv = cli.main(args=argv, prog_name="cachetool", standalone_mode=False)
    except CachetoolError as exc:
        click.echo(f"error: {exc}", err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("error: aborted", err=True)
        return 1
    except click.UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `cachetool`: show the help, as click does
            exc.show()
            return exc.exit_code
        # Click's own report is three lines (Usage, Try, Error); bad input here is always one line.
        click.echo(f"error: {exc.format_message()} (see `cachetool --help`)", err=True)
        return exc.exit_code
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        return exc.exit_code
    # With standalone_mode=False click returns ctx.exit()'s code, or the command's return value.
    return rv if isinstance(rv, int) else 0


def entry() -> None:
    rc = main()
    if EXIT_WITHOUT_JOINING.is_set():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    sys.exit(rc)
