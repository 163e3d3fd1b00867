"""``cachetool warm`` and ``cachetool check``: thin click commands over :func:`cachetool.api.warm` and
:func:`cachetool.api.check`.

Both take ``--model M --cache-root DIR [--device cpu|cuda] [--compilation-config JSON] [-cc.KEY=VALUE ...] [--json]``;
``-cc.dynamic_shapes_config.type=unbacked`` style overrides are collected from the extra arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from cachetool import exit_codes
from cachetool.api import ENGINE_CHOICES, ENGINE_HELP, CompilationConfigError, init_logging
from cachetool.cli import output
from cachetool.cli.common import (
    CC_HELP,
    STORED_MEANS,
    OneLineCommand,
    cache_root_option,
    device_option,
    exact_size,
    json_option,
    sign_key_option,
)
from cachetool.cli.group import cli
from cachetool.cli.output import emit
from cachetool.cli.store_options import options_dict, store_options as _store_options
from cachetool.errors import EngineMissError

_CONTEXT = {"help_option_names": ["-h", "--help"]}
_OVERRIDE_PREFIXES = ("-cc.", "--cc.", "--compilation-config.")


class CompileCommand(OneLineCommand):
    """Collects ``-cc.key=value`` / ``-cc.key value`` overrides before click parses (click would read
    ``-cc.x`` as the short flag ``-c``); they land in ``ctx.meta["cc_overrides"]`` in order. A bad flag or value
    is one ``error:`` line, as in the other commands."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        keep: list[str] = []
        overrides: list[str] = []
        i = 0
        while i < len(args):
            a = args[i]
            if a == "--":
                keep.extend(args[i:])
                break
            if a.startswith(_OVERRIDE_PREFIXES):
                if "=" not in a:
                    if i + 1 >= len(args):
                        raise CompilationConfigError(f"compilation config override needs a value: {a}")
                    a = f"{a}={args[i + 1]}"
                    i += 1
                overrides.append(a)
            else:
                keep.append(a)
            i += 1
        ctx.meta["cc_overrides"] = overrides
        return super().parse_args(ctx, keep)


def _overrides(ctx: click.Context) -> list[str]:
    return list(ctx.meta.get("cc_overrides", []))


# warm's and check's options, in --help's order (each a click decorator, applied to both commands by _common)
START_COMMAND_OPTIONS = [
    click.option(
        "--model",
        "-m",
        default=None,
        help="Preset (tiny, llama-3.2-1b, llama-3.1-8b), config.json or HF folder; --engine vllm: the "
        "model folder or hub id, or name it after -- as in `vllm serve M` (-- M FLAGS).",
    ),
    cache_root_option,
    device_option("Device to run on", "cpu", extra="; bf16 on cuda, fp32 on cpu", value="cpu"),
    click.option("--compilation-config", "-cc", "compilation_config", default=None, help=CC_HELP),
    click.option(
        "--rank",
        default=0,
        show_default=True,
        type=click.IntRange(min=0),
        help="Tensor-parallel rank (folder name).",
    ),
    click.option(
        "--dp-rank",
        "--data-parallel-rank",
        "dp_rank",
        default=0,
        show_default=True,
        type=click.IntRange(min=0),
        help="Data-parallel rank (folder name rank_{tp}_{dp}).",
    ),
    click.option(
        "--tensor-parallel-size",
        "-tp",
        "tensor_parallel_size",
        default=1,
        show_default=True,
        type=click.IntRange(min=1),
        help="Launch N tensor-parallel ranks (gloo on cpu, NCCL on cuda), one cache folder each.",
    ),
    json_option,
    click.option(
        "--engine",
        type=click.Choice(ENGINE_CHOICES),
        default=ENGINE_CHOICES[0],
        show_default=True,
        help=ENGINE_HELP,
    ),
    click.option(
        "--timeout",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        metavar="SECONDS",
        help="Bound the whole command; past it every process it started is ended, exit 7 (with --engine "
        "vllm naming the phase vLLM's start was in, e.g. its DeepGEMM JIT warm-up).",
    ),
    click.option(
        "--load-weights",
        is_flag=True,
        help="--engine vllm: load the model's weights (default: dummy weights; compiled code does "
        "not depend on weight values).",
    ),
    click.argument("engine_args", nargs=-1, type=click.UNPROCESSED),
]


def _common(f: Callable[..., Any]) -> Callable[..., Any]:
    for opt in reversed(START_COMMAND_OPTIONS):
        f = opt(f)
    return f


# The start options a command line can set, by their API keywords (cachetool.engines.base.START_OPTIONS): only
# those set reach the engine, whose own request holds the defaults; an engine refuses another engine's option.
_START_OPTIONS = {
    "device": "device",
    "compilation_config": "config",
    "rank": "rank",
    "dp_rank": "dp_rank",
    "tensor_parallel_size": "tensor_parallel_size",
    "load_weights": "load_weights",
    "require_hit": "require_hit",
}


def given_options(ctx: click.Context) -> dict[str, Any]:
    """The start options set on this command line, by their API keywords, with their values."""
    from click.core import ParameterSource

    given = {
        keyword: ctx.params[name]
        for name, keyword in _START_OPTIONS.items()
        if name in ctx.params and ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE
    }
    if _overrides(ctx):
        given["overrides"] = _overrides(ctx)
    if ctx.params.get("engine_args"):
        given["engine_flags"] = list(ctx.params["engine_args"])
    return given


def _summary(result: Any) -> str:
    """The one-line ``message`` of a warm/check result's JSON object."""
    verdict = "hit: nothing compiled" if result.hit else "compiled"
    return f"{result.command} {result.model}: {verdict} (cache key {result.cache_key or '-'})"


def _show(result: Any, as_json: bool) -> int:
    """A start's result: one JSON object, or its lines."""
    if as_json:
        return emit(True, result.to_json(), _summary(result))
    for line in result.lines():
        click.echo(line)
    return 0


def _say(as_json: bool):
    return None if as_json else (lambda m: click.echo(m, err=True))


@cli.command(cls=CompileCommand, context_settings=_CONTEXT)
@_common
@click.option(
    "--push",
    "push_ref",
    default=None,
    metavar="REF",
    help="After compiling, pack the cache folder, sign it and push it to REF "
    "(file:///dir/name:tag, s3://bucket/prefix/name:tag, oci://host/repo:tag).",
)
@sign_key_option("Ed25519 private key (cachetool keygen) that signs the pushed bundle; required with --push.")
@_store_options
@click.pass_context
def warm(
    ctx: click.Context,
    model: str | None,
    cache_root: str | None,
    device: str,
    compilation_config: str | None,
    rank: int,
    dp_rank: int,
    tensor_parallel_size: int,
    as_json: bool,
    engine: str,
    load_weights: bool,
    timeout: float | None,
    engine_args: tuple[str, ...],
    push_ref: str | None,
    sign_key: str | None,
    endpoint_url: str | None,
    profile: str | None,
    insecure: bool,
) -> None:
    """Run the compile pipeline for the --model as a server would, filling the cache root; with --push, also pack,
    sign and push the result. With --engine vllm, real vLLM runs headless (`warm --engine vllm --model DIR --
    [vllm serve flags]`) and the key folder it wrote is packed with vLLM's facts."""
    from cachetool.api import start_request, warm as warm_api
    from cachetool.cli.progress import progress_renderer

    init_logging()
    with progress_renderer(as_json) as render:  # piece i of n, compile sizes, autotune (stderr; none with --json)
        start = start_request(
            "warm", model, cache_root, engine=engine, on_progress=render, engine_progress=render, **given_options(ctx)
        )
        summary = warm_api(
            start,
            push=push_ref,
            sign_key=sign_key,  # the one start, handed down as it is
            store_options=options_dict(endpoint_url, profile, insecure),
            timeout=timeout,
        )
    if summary.push is None:
        return _show(summary.compile, as_json)  # type: ignore[return-value]  # baseline (issue 46)
    if as_json:
        return emit(True, summary.to_json(), f"{_summary(summary.compile)}; pushed {summary.push.ref}")  # type: ignore[return-value]  # baseline (issue 46)
    _show(summary.compile, False)
    click.echo("\n".join(push_lines(summary)))


def push_lines(summary) -> list[str]:
    """What ``warm --push`` adds to the start's lines: the sizes (each named, in binary units with the exact bytes
    that ``ls`` and ``--json`` show for the same quantity), where it went, the phases."""
    p = summary.push
    return [
        f"  bytes          raw {exact_size(summary.bytes_raw)}, unique {exact_size(summary.bytes_unique)}, "
        f"stored {exact_size(summary.bytes_compressed)}: {STORED_MEANS}, as `ls` lists it",
        f"  pushed         {p.ref} [{p.platform}] {p.manifest_digest}",
        f"  pinned         {p.pinned}",
        f"  blobs          {p.blobs_uploaded} uploaded, {p.blobs_skipped} already there; "
        f"{'signed' if p.signed else 'UNSIGNED'}",
        "  phases         " + ", ".join(f"{k} {v:.2f} s" for k, v in summary.phases.items()),
    ]


@cli.command(cls=CompileCommand, context_settings=_CONTEXT)
@_common
@click.option(
    "--require-hit",
    is_flag=True,
    help=f"Exit non-zero if anything compiles: {exit_codes.COMPILED.code} (native engine, before the start "
    f"compiles), {exit_codes.MISS.code} with --engine vllm (a miss, naming why).",
)
@click.pass_context
def check(
    ctx: click.Context,
    model: str | None,
    cache_root: str | None,
    device: str,
    compilation_config: str | None,
    rank: int,
    dp_rank: int,
    tensor_parallel_size: int,
    as_json: bool,
    engine: str,
    load_weights: bool,
    timeout: float | None,
    engine_args: tuple[str, ...],
    require_hit: bool,
) -> None:
    """Start the --model as a server would (load, prefill and decode) and report compiled vs loaded graphs. With
    --engine vllm, real vLLM starts on the cache root with the flags after -- and reports what Inductor compiled
    and loaded and whether vLLM loaded its AOT artifact; --require-hit then exits 4 on a miss, naming why."""
    from cachetool.api import check as check_api, start_request

    init_logging()
    start = start_request(
        "check", model, cache_root, engine=engine, engine_progress=_say(as_json), **given_options(ctx)
    )
    try:
        result = check_api(start, timeout=timeout)  # the one start, handed down as it is
    except EngineMissError as exc:  # the start compiled: its lines (or fields), then the one error line
        if exc.start is not None:
            if not as_json:
                for line in exc.start.lines():
                    click.echo(line)
            output.add_failure_fields(**exc.start.to_json())  # the failure's one object carries the start's fields
        raise
    return _show(result, as_json)  # type: ignore[return-value]  # baseline (issue 46)
