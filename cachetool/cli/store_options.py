"""Options every command that talks to a store shares (push, pull, ls, rm, gc, warm --push)."""

from __future__ import annotations

import click


def store_options(f):
    f = click.option(
        "--endpoint-url",
        default=None,
        metavar="URL",
        help="S3: endpoint of an S3-compatible server (default: AWS_ENDPOINT_URL).",
    )(f)
    f = click.option("--profile", default=None, help="S3: AWS profile (default: AWS_PROFILE / the standard chain).")(f)
    f = click.option(
        "--insecure",
        is_flag=True,
        help="OCI: TLS without verifying the registry's certificate (see also --plain-http).",
    )(f)
    f = click.option(
        "--plain-http",
        is_flag=True,
        expose_value=False,
        callback=_remember_plain_http,
        help="OCI: speak plain HTTP to the registry (no TLS). Local registries fall back to it anyway.",
    )(f)
    return f


def _remember_plain_http(ctx, _param, value):
    # kept in the context, so that the commands' signatures (shared with warm --push) stay as they are
    ctx.meta["cachetool.plain_http"] = bool(value)
    return value


def options_dict(endpoint_url, profile, insecure) -> dict:
    """The store flags as the library's store options; a flag left out is None or False, which the library does not
    count as given (``stores.given_options``), so it never reaches a store that would refuse it."""
    ctx = click.get_current_context(silent=True)
    plain_http = bool(ctx and ctx.meta.get("cachetool.plain_http"))
    return {"endpoint_url": endpoint_url, "profile": profile, "insecure": insecure, "plain_http": plain_http}
