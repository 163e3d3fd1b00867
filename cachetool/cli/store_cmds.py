"""``cachetool push | pull | ls | rm | gc`` (see docs/stores.md)."""

from __future__ import annotations

import shlex

import click

from cachetool.api import ENGINE_CHOICES, GC_MIN_AGE_S, ON_MISS, PULL_OUTCOMES, PullOutcome
from cachetool.cli import output
from cachetool.cli.common import (
    CC_HELP,
    STORED_MEANS,
    OneLineCommand,
    WordedDefault,
    cache_root_option,
    device_option,
    exact_size,
    human_size,
    json_option,
    layout_option,
    ranks_option,
    replace_options,
    sign_key_option,
    trust_option,
    warn_loud,
)
from cachetool.cli.compile_cmds import CompileCommand
from cachetool.cli.group import cli
from cachetool.cli.output import emit
from cachetool.cli.store_options import options_dict, store_options
from cachetool.errors import CachetoolError, UsageError


@cli.command("push", cls=OneLineCommand)
@click.argument("source", type=click.Path(exists=True))
@click.argument("ref")
@sign_key_option(
    "Ed25519 private key (cachetool keygen): sign while packing a cache folder, or add a signature to a bundle file."
)
@layout_option(help="Layout of a cache folder SOURCE.")
@click.option("--workers", type=click.IntRange(1, 64), default=8, show_default=True, help="Parallel uploads.")
@json_option
@click.option("--progress/--no-progress", default=None, help="Progress bars (default: when stderr is a terminal).")
@store_options
def push_cmd(source, ref, sign_key, layout, workers, as_json, progress, endpoint_url, profile, insecure):
    """Push SOURCE (a .ctb file, or a cache folder packed on the way) to REF.

    REF: file:///dir/name:tag, s3://bucket/prefix/name:tag or oci://host[:port]/repo:tag. Blobs the store
    already has are skipped; the ref is written last.
    """
    from cachetool import api

    r = api.push(
        source,
        ref,
        sign_key=sign_key,
        layout=layout,
        workers=workers,
        store_options=options_dict(endpoint_url, profile, insecure),
        progress=False if as_json else progress,
    )
    if not r.signed:
        warn_loud(f"warning: {r.ref} is UNSIGNED: pull refuses it unless --insecure-skip-verify (sign with --sign-key)")
    return emit(
        as_json,
        r.to_json(),
        f"pushed {r.ref} [{r.platform}] {r.manifest_digest}\n"
        f"blobs: {r.blobs_uploaded} uploaded, {r.blobs_skipped} already there (of {r.blobs_total}); "
        f"{human_size(r.bytes_uploaded)} sent in all (blobs, manifest, signature, ref), "
        f"{human_size(r.bytes_skipped)} of blobs not sent; {r.seconds:.2f}s"
        + ("; signed" if r.signed else "")
        + f"\nplatforms under the tag: {', '.join(r.platforms)}"
        + f"\npinned: {r.pinned}",
    )


def _render(outcome: PullOutcome, as_json: bool) -> int:
    """A pull's outcome, rendered: its ``pull: outcome=`` line; the result (one JSON object or its lines); a failure
    that the policy does not continue is raised for the CLI's one error line (with the outcome's JSON fields)."""
    from cachetool.cli.group import EXIT_WITHOUT_JOINING

    _report(outcome)
    if outcome.abandoned_threads:
        EXIT_WITHOUT_JOINING.set()  # worker threads stuck in a read: exit without joining them
    if outcome.error is not None and not outcome.continued:
        exc = outcome.error
        raise exc if isinstance(exc, CachetoolError) else CachetoolError(outcome.message)
    if outcome.error is not None:
        click.echo(
            f"pull: no usable bundle ({outcome.outcome}); continuing without it (--on-miss continue): "
            "the server will compile",
            err=True,
        )
        return emit(as_json, outcome.to_json(), "")
    if outcome.not_needed is not None:
        return emit(as_json, outcome.to_json(), f"not needed: {outcome.not_needed.reason}; nothing installed")
    r, i = outcome.result, outcome.result.install  # type: ignore[union-attr]  # baseline (issue 46)  # no error: it installed, or found its bundle installed
    return emit(
        as_json,
        outcome.to_json(),
        f"{outcome.outcome} {r.ref} [{r.platform}] into {i.cache_root}: {len(i.units_installed)} unit(s), "  # type: ignore[union-attr]  # baseline (issue 46)
        f"{i.files} files ({human_size(i.bytes)}); {r.blobs_downloaded} blob(s) downloaded, "  # type: ignore[union-attr]  # baseline (issue 46)
        f"{human_size(r.bytes_downloaded)} received in all (blobs, index, manifest, signature)"  # type: ignore[union-attr]  # baseline (issue 46)
        + (f", {r.blobs_resumed} resumed" if r.blobs_resumed else "")  # type: ignore[union-attr]  # baseline (issue 46)
        + (f", {r.blobs_reused} reused from an interrupted pull" if r.blobs_reused else "")  # type: ignore[union-attr]  # baseline (issue 46)
        + f"; {r.seconds:.2f}s\n"  # type: ignore[union-attr]  # baseline (issue 46)
        + (f"signed by trusted key {i.key_id}" if i.verified else "SIGNATURE NOT VERIFIED")  # type: ignore[union-attr]  # baseline (issue 46)
        + (f"; preflight: {', '.join(i.preflight)}" if i.preflight else "; preflight skipped")  # type: ignore[union-attr]  # baseline (issue 46)
        + "\nserver environment: "
        + " ".join(f"{k}={shlex.quote(v)}" for k, v in r.server_env.items()),  # type: ignore[union-attr]  # baseline (issue 46)
    )


def _report(outcome: PullOutcome) -> None:
    """The outcome line every pull prints, and its fields for the JSON object of a failure."""
    click.echo(outcome.line(), err=True)
    if outcome.error is not None:
        output.add_failure_fields(**outcome.to_json())


ON_MISS_DEFAULT = "fail"


def _pull_help() -> str:
    """pull's help, its outcomes and exits taken from the outcomes themselves and the exit-code table (a hand-written
    list had lost `interrupted` and `disk-full`, exits 9 and 130)."""
    by_row: dict = {}
    for outcome in PULL_OUTCOMES:
        by_row.setdefault(outcome.row, []).append(outcome.value)
    rows = sorted(by_row, key=lambda row: row.code)
    width = max(len(", ".join(names)) for names in by_row.values())
    lines = [
        f"  {', '.join(by_row[row]):<{width}}  exit {row.code}"
        + (" (0 under --on-miss continue)" if row.continuable else "")
        for row in rows
    ]
    return (
        "Fetch REF and install it into the cache root: signature and preflight checked before any blob is "
        "fetched. With --engine vllm --model M -- [vllm serve flags], the preflight also checks the key this "
        "vLLM server will use (model path, config fields, env factors, versions), asking vLLM itself (it "
        "imports vLLM: seconds).\n\n"
        "Each pull ends in one outcome, named in its `pull: outcome=...` line on stderr (and `outcome` with "
        "--json), and exits with its code:\n\n\b\n" + "\n".join(lines)
    )


def _continued_help() -> str:
    """--on-miss's help: the failures it continues, from the exit-code table."""
    rows = sorted({o.row for o in PULL_OUTCOMES if o.row.continuable}, key=lambda row: row.code)
    return (
        "continue: exit 0 when nothing could be installed because the cache is unavailable or unusable ("
        + ", ".join(f"{row.name} {row.code}" for row in rows)
        + "), so the server starts cold; any other "
        "failure still exits with its code."
    )


class PullCommand(CompileCommand):
    """A flag click refuses is an outcome too: its ``pull: outcome=usage-error`` line, then the usual error."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except CachetoolError as exc:
            from cachetool.api import pull_refused_outcome

            _report(pull_refused_outcome(next((a for a in args if "://" in a), None), exc, _given_on_miss(args)))
            raise


def _given_on_miss(args: list[str]) -> str:
    """The ``--on-miss`` a command line gives (its last, as click takes it; the default when none), read from the raw
    arguments: a refusal is reported with the policy the user asked for, though click refused before reading it."""
    given = ON_MISS_DEFAULT
    options = args[: args.index("--")] if "--" in args else args
    for i, a in enumerate(options):
        if a == "--on-miss" and i + 1 < len(options):
            given = options[i + 1]
        elif a.startswith("--on-miss="):
            given = a.partition("=")[2]
    return given


@cli.command("pull", cls=PullCommand, help=_pull_help())
@click.argument("ref")
@cache_root_option
@trust_option
@ranks_option
@device_option(
    "Device to choose the tag's bundle for and preflight against",
    "this machine's: cuda if the tag holds a GPU bundle and this machine a GPU, else cpu",
)
@replace_options
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="Bound the whole pull; past it exit 7.",
)
@click.option(
    "--on-miss", type=click.Choice(ON_MISS), default=ON_MISS_DEFAULT, show_default=True, help=_continued_help()
)
@click.option(
    "--workers",
    cls=WordedDefault,
    type=click.IntRange(1, 64),
    default=None,
    show_default="2 per CPU core, from 2 to 8",
    help="Parallel downloads.",
)
@json_option
@click.option("--progress/--no-progress", default=None, help="Progress bars (default: when stderr is a terminal).")
@click.option(
    "--model",
    "-m",
    default=None,
    help="The server's model: preflight then also checks the cache key this model/config needs "
    "(config fields, traced files), before any blob is fetched.",
)
@click.option(
    "--compilation-config", "-cc", "compilation_config", default=None, help="With --model: the server's " + CC_HELP
)
@click.option(
    "--tensor-parallel-size",
    "-tp",
    "tensor_parallel_size",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="The server's tensor-parallel size, with --model.",
)
@click.option(
    "--engine",
    type=click.Choice(ENGINE_CHOICES),
    default=None,
    help="The server's engine: take its bundles from the tag; with --model (and vLLM's flags after --) "
    "vllm asks vLLM which key folder the server will use before any blob is fetched.",
)
@click.argument("engine_args", nargs=-1, type=click.UNPROCESSED)
@store_options
@click.pass_context  # type: ignore[arg-type]  # baseline (issue 46)
def pull_cmd(ctx, ref, on_miss, as_json, **kwargs):
    """Fetch REF and install it (the help is :func:`_pull_help`'s: it lists the outcomes)."""
    from cachetool.api import pull_outcome, pull_refused_outcome, pull_request

    try:  # the one request of this pull, handed down as it is
        request = pull_request(ref, **_pull_arguments(ctx, **kwargs))
    except Exception as exc:  # a wrong flag, an engine that is none: an outcome too
        return _render(pull_refused_outcome(ref, exc, on_miss), as_json)
    return _render(pull_outcome(request, on_miss=on_miss), as_json)


def _pull_arguments(
    ctx,
    cache_root,
    trust,
    ranks,
    device,
    force,
    keep_changed,
    insecure_skip_verify,
    timeout,
    workers,
    progress,
    model,
    compilation_config,
    tensor_parallel_size,
    engine,
    engine_args,
    endpoint_url,
    profile,
    insecure,
) -> dict:
    """The flags this pull was given, as the request's keywords (a flag that cannot be one is refused here; a
    default is the request's own)."""
    overrides = ctx.meta.get("cc_overrides", [])
    if (compilation_config or overrides) and model is None:
        raise UsageError("--compilation-config/-cc on pull needs --model (the server's model)")
    quiet = ctx.params.get("as_json")
    # no --cache-root: the root the server of --engine reads (an init-container that pulled elsewhere would leave
    # the server cold), api.default_cache_root's
    # the server's key question: only what was given reaches its engine, which refuses another engine's option
    server = {
        "model": model,
        "config": compilation_config,
        "overrides": overrides,
        "tensor_parallel_size": tensor_parallel_size if _given(ctx, "tensor_parallel_size") else None,
        "engine_flags": list(engine_args),
    }
    return dict(
        cache_root=cache_root or None,
        trust=list(trust) or None,
        insecure_skip_verify=insecure_skip_verify,
        ranks=ranks,
        engine=engine,
        device=device,
        force=force,
        keep_changed=keep_changed,
        timeout=timeout,
        workers=workers,
        warn=warn_loud,
        store_options=options_dict(endpoint_url, profile, insecure),
        progress=False if quiet else progress,
        **{k: v for k, v in server.items() if v is not None and v != []},
    )


def _given(ctx, name: str) -> bool:
    """Whether ``name`` was set on the command line (not its default)."""
    from click.core import ParameterSource

    return ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE


@cli.command("ls", cls=OneLineCommand)
@click.argument("store")
@json_option
@store_options
def ls_cmd(store, as_json, endpoint_url, profile, insecure):
    """List the refs of STORE (file:///dir, s3://bucket/prefix, oci://host/repo): tags, dates, sizes, platforms.

    A ref (file:///dir/name:tag) lists that tag; a bundle name without a tag (file:///dir/name) lists that name's
    tags."""
    from cachetool import api

    listing = api.ls(store, store_options=options_dict(endpoint_url, profile, insecure))
    if as_json or not listing.refs:
        return emit(
            as_json,
            listing.to_json(),
            f"{listing.store}: {len(listing.refs)} ref entries" if listing.refs else f"{listing.store}: no refs",
        )
    from rich.console import Console
    from rich.table import Table

    t = Table(title=listing.store, box=None, caption=f"STORED: {STORED_MEANS}", caption_justify="left")
    for col in ("REF", "PLATFORM", "CREATED", "STORED", "DIGEST", "GPU"):
        t.add_column(col)
    for row in listing.refs:
        t.add_row(
            row.ref,
            row.platform,
            row.created,
            exact_size(row.size),
            row.manifest_digest[:19],
            str(row.fingerprint.get("gpu") or "-"),
        )
    Console(width=200).print(t)
    return 0


@cli.command("rm", cls=OneLineCommand)
@click.argument("ref")
@click.option("--platform", default=None, metavar="PLATFORM", help="Remove only this platform's entry of the tag.")
@json_option
@store_options
def rm_cmd(ref, platform, as_json, endpoint_url, profile, insecure):
    """Remove REF (the tag; blobs stay until `cachetool gc`)."""
    from cachetool import api

    r = api.rm(ref, platform=platform, store_options=options_dict(endpoint_url, profile, insecure))
    return emit(
        as_json,
        r.to_json(),
        f"removed {ref}" + (f" [{platform}]; left: {', '.join(r.remaining)}" if r.remaining else ""),
    )


def _age(seconds: float) -> str:
    """A default age as a person reads it: ``3600`` → ``3600 s (1 hour)``."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"{seconds:g} s ({n} {unit}{'s' if n > 1 else ''})"
    return f"{seconds:g} s"


@cli.command("gc", cls=OneLineCommand)
@click.argument("store")
@click.option("--dry-run", is_flag=True, help="Only list what would be deleted.")
@click.option(
    "--older-than",
    cls=WordedDefault,
    type=click.FloatRange(min=0),
    default=GC_MIN_AGE_S,
    show_default=_age(GC_MIN_AGE_S),
    metavar="SECONDS",
    help="Keep objects written more recently (a push in flight writes blobs before its ref).",
)
@json_option
@store_options
def gc_cmd(store, dry_run, older_than, as_json, endpoint_url, profile, insecure):
    """Delete blobs, manifests and signatures of STORE that no ref reaches (on a registry: signatures; its own
    garbage collection reclaims blobs and untagged manifests)."""
    from cachetool import api

    report = api.gc(
        store, dry_run=dry_run, older_than=older_than, store_options=options_dict(endpoint_url, profile, insecure)
    )
    out = report.deleted
    why = [
        f"{report.kept_reachable} reachable from a ref",
        f"{report.kept_young} younger than {older_than:g} s (--older-than; a push may be in flight)",
    ]
    if report.kept_foreign:
        why.append(f"{report.kept_foreign} written by other tools")
    return emit(
        as_json,
        report.to_json(),
        f"{'would delete' if dry_run else 'deleted'} {len(out)} object(s) from {report.store}; kept {report.kept}: "
        + ", ".join(why)
        + "".join(f"\n  {x}" for x in out[:50])
        + (f"\n  ... {len(out) - 50} more" if len(out) > 50 else ""),
    )


@cli.command("prune", cls=OneLineCommand)
@click.option(
    "--cache-root",
    type=click.Path(file_okay=False),
    default=None,
    help="Cache root to prune (required: prune deletes, so the root is named, never a default).",
)
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
@click.option(
    "--older-than",
    cls=WordedDefault,
    type=click.FloatRange(min=0),
    default=GC_MIN_AGE_S,
    show_default=_age(GC_MIN_AGE_S),
    metavar="SECONDS",
    help="Keep entries written more recently (a server may be starting now).",
)
@json_option
def prune_cmd(cache_root, dry_run, older_than, as_json):
    """Remove from a local cache root what no later start reads: vLLM's per-start AOTAutograd entries but the
    last start's of each key folder (a kept root grows by one per rank and restart). Safe while a server runs."""
    from cachetool import api

    if cache_root is None:  # the root a server restarts on is named, never guessed: prune deletes
        raise UsageError("prune needs --cache-root (the root a server restarts on, e.g. its VLLM_CACHE_ROOT)")
    report = api.prune(cache_root, older_than=older_than, dry_run=dry_run)
    out = report.removed
    return emit(
        as_json,
        report.to_json(),
        f"{'would remove' if dry_run else 'removed'} {len(out)} entr{'y' if len(out) == 1 else 'ies'} "
        f"({human_size(report.bytes_freed)}) from {report.root}; kept the last start's of each key folder and "
        f"{report.kept_young} younger than {older_than:g} s (--older-than)"
        + "".join(f"\n  {x}" for x in out[:50])
        + (f"\n  ... {len(out) - 50} more" if len(out) > 50 else ""),
    )
