"""The ``cachetool`` click group the command modules add their commands to, and the process-wide flag a command
sets for :func:`cachetool.cli.entry`: a module of its own, so that the command modules import it without importing
the package's front door, which loads them."""

from __future__ import annotations

import threading

import click

from cachetool.version import __version__

__all__ = ["EXIT_WITHOUT_JOINING", "cli"]

# Set by a command that abandoned worker threads blocked in I/O (pull past its hard --timeout): the process then
# exits at once with its code instead of joining threads stuck in a socket read for minutes.
EXIT_WITHOUT_JOINING = threading.Event()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="cachetool")
def cli() -> None:
    """Warm, bundle, sign, push and pull torch.compile caches."""
