"""What every CLI command module shares: the one-line error command class, byte sizes, loud
warnings and the shared options (``--layout``'s choices come from the layout registry)."""

from __future__ import annotations

import re

import click

from cachetool.api import CACHE_ROOT_HELP, DEFAULT_CACHE_ROOT_HELP
from cachetool.errors import UsageError


class OneLineCommand(click.Command):
    """A bad flag, a missing argument or a bad value is one ``error:`` line and exit 2, like every other bad
    input (click's own report is three lines, with ``Usage:`` and ``Error:``). ``cachetool --help`` lists the verb
    with its help's first sentence, whole."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise UsageError(f"{exc.format_message()} (see `cachetool {self.name} --help`)") from None

    def get_short_help_str(self, limit: int = 45) -> str:
        """The help's first sentence, whole: click's cuts it at the terminal's width with "…" (the list wraps it)."""
        if self.short_help or not self.help:
            return super().get_short_help_str(limit)
        return first_sentence(self.help)


def first_sentence(text: str) -> str:
    """The first sentence of ``text``'s first paragraph, on one line."""
    paragraph = " ".join(text.strip().split("\n\n")[0].split())
    return re.split(r"(?<=[.)])\s+(?=[A-Z])", paragraph, maxsplit=1)[0]


class WordedDefault(click.Option):
    """An option whose default is said in words (``show_default="3600 s (1 hour)"``), shown as written: click puts a
    worded default in parentheses, ``[default: (3600 s (1 hour))]``."""

    def get_help_extra(self, ctx: click.Context):
        extra = super().get_help_extra(ctx)
        if isinstance(self.show_default, str):
            extra["default"] = self.show_default
        return extra


def human_size(n: int) -> str:
    """``1536`` → ``1.5 KiB``."""
    f = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if f < 1024 or unit == "TiB":
            return f"{f:.0f} {unit}" if unit == "B" else f"{f:.1f} {unit}"
        f /= 1024
    return f"{n} B"


def exact_size(n: int) -> str:
    """``398319`` → ``389.0 KiB (398319 B)``: a size as people read it and as the bytes that every other report of the
    same quantity shows (``ls``, ``--json``)."""
    return f"{human_size(n)} ({n} B)"


# What a store holds of a bundle, the size `ls` lists (STORED) and `warm --push` reports; `pack` and `inspect` report
# the compressed blobs alone (the manifest is made with them).
STORED_MEANS = "compressed blobs and manifest"


def warn_loud(msg: str) -> None:
    """A warning the user must not miss (unsigned, unverified): red and bold on stderr."""
    click.secho(msg, fg="red", bold=True, err=True)


def layout_option(help: str | None = None):
    """``--layout`` with the registry's choices (``auto`` and every layout in :mod:`cachetool.layouts`)."""
    from cachetool.api import layout_choices

    return click.option(
        "--layout",
        type=click.Choice(list(layout_choices())),
        default="auto",
        show_default=True,
        help=help or "Layout of the cache folder (auto: recognised from its files).",
    )


# One wording per shared option: every verb takes --json, a key to sign with is --sign-key.
json_option = click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON object (one line) on stdout, failures included (ok, exit_code, message, ...).",
)


def sign_key_option(help: str, required: bool = False):
    """``--sign-key``: a missing or unreadable file is refused by the loader (one line, exit 2), not by click."""
    return click.option(
        "--sign-key", type=click.Path(dir_okay=False), required=required, default=None, metavar="KEY", help=help
    )


trust_option = click.option(
    "--trust",
    "trust",
    multiple=True,
    metavar="PUB",
    help="Trusted public key file or folder (repeatable). Default: CACHETOOL_TRUSTED_KEYS, then "
    "~/.config/cachetool/trusted_keys/*.pub.",
)

# verbs with --engine (warm, check, pull): the root of the engine's server, each engine's default from the registry
cache_root_option = click.option("--cache-root", type=click.Path(file_okay=False), default=None, help=CACHE_ROOT_HELP)
# verbs without --engine (install): no word of a flag they lack
native_cache_root_option = click.option(
    "--cache-root", type=click.Path(file_okay=False), default=None, help=DEFAULT_CACHE_ROOT_HELP
)


def device_option(what: str, default: str, extra: str = "", value: str | None = None):
    """``--device``, in the one wording every verb uses: what it is for, what it takes (``cpu``, ``cuda``,
    ``cuda:N``), and its default in words (``value`` is the default's value, when it has one)."""
    return click.option(
        "--device", default=value, metavar="DEVICE", help=f"{what}: cpu, cuda or cuda:N{extra} (default: {default})."
    )


# -cc.KEY=VALUE is collected before click parses (cachetool.cli.compile_cmds.CompileCommand)
CC_HELP = (
    "CompilationConfig as JSON; -cc.KEY=VALUE (KEY dotted, e.g. -cc.dynamic_shapes_config.type=unbacked) "
    "overrides one field."
)

ranks_option = click.option("--ranks", default=None, help="Only these ranks: 0,1 (tensor-parallel) or 0_1 / rank_0_1.")


def replace_options(f):
    """The flags of ``install`` and ``pull`` that say what happens to units that differ, and to the signature."""
    for opt in reversed(
        [
            click.option(
                "--force",
                is_flag=True,
                help="Replace install units that differ from the bundle (the default; overrides --keep-changed).",
            ),
            click.option(
                "--keep-changed", is_flag=True, help="Refuse (exit 4) instead of replacing a unit whose files differ."
            ),
            click.option("--insecure-skip-verify", is_flag=True, help="Do NOT check the signature (dangerous)."),
        ]
    ):
        f = opt(f)
    return f
