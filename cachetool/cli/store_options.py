"""Options every command that talks to a store shares (push, pull, ls, rm, gc, warm --push)."""

from __future__ import annotations

import click


def store_options(f):
    f = click.option("--endpoint-url", default=None, metavar="URL",
                     help="S3: endpoint of an S3-compatible server (default: AWS_ENDPOINT_URL).")(f)
    f = click.option("--profile", default=None, help="S3: AWS profile (default: AWS_PROFILE / the standard chain).")(f)
    f = click.option("--insecure", is_flag=True,
                     help="OCI: allow plain HTTP / unverified TLS for a registry other than localhost.")(f)
    return f


def options_dict(endpoint_url, profile, insecure) -> dict:
    return {"endpoint_url": endpoint_url, "profile": profile, "insecure": insecure}
