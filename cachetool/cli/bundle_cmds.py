"""``cachetool pack | keygen | sign | inspect | verify | install | diff`` (see docs/bundles.md)."""

from __future__ import annotations

import json

import click

from cachetool import exit_codes
from cachetool.api import ENGINE_CHOICES
from cachetool.cli.common import (
    OneLineCommand,
    WordedDefault,
    device_option,
    exact_size,
    human_size,
    json_option,
    layout_option,
    native_cache_root_option,
    ranks_option,
    replace_options,
    sign_key_option,
    trust_option,
    warn_loud,
)
from cachetool.cli.group import cli
from cachetool.cli.output import emit
from cachetool.cli.store_options import options_dict, store_options

platform_option = click.option(
    "--platform",
    default=None,
    metavar="PLATFORM",
    help="For a ref: the tag's bundle of this platform (default: the only one, else this machine's).",
)


@cli.command("pack", cls=OneLineCommand)
@click.argument("path", type=click.Path(file_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="The .ctb file to write.")
@sign_key_option("Ed25519 private key (cachetool keygen) that signs the bundle.")
@layout_option()
@click.option("--level", type=click.IntRange(1, 22), default=3, show_default=True, help="zstd level.")
@json_option
def pack_cmd(path, output, sign_key, layout, level, as_json):
    """Pack a cache (root, hash folder or rank folder) into a signed single-file bundle."""
    from cachetool import api

    r = api.pack(path, output, sign_key=sign_key, layout=layout, level=level)
    if not r.signed_by:
        click.echo("unsigned: `cachetool sign` it before others can install it", err=True)
    b = r.bytes
    return emit(
        as_json,
        r.to_json(),
        f"packed {r.files} files: raw {human_size(b.raw)}, {r.unique_blobs} unique {human_size(b.unique)}, "
        f"compressed blobs {exact_size(b.compressed)}; layout={r.layout} ranks={','.join(r.ranks) or '-'} -> "
        f"{r.output}\nmanifest {r.manifest_digest}  platform {r.platform}"
        + (f"\nsigned by {', '.join(r.signed_by)}" if r.signed_by else ""),
    )


@cli.command("keygen", cls=OneLineCommand)
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False),
    metavar="NAME",
    help="Writes NAME (private key, mode 0600) and NAME.pub.",
)
@json_option
def keygen_cmd(output, as_json):
    """Generate an Ed25519 signing key pair."""
    from cachetool import api

    k = api.keygen(output)
    return emit(
        as_json,
        k.to_json(),
        f"private key {k.private_key} (keep secret)\npublic key  {k.public_key}\nkey id      {k.key_id}",
    )


@cli.command("sign", cls=OneLineCommand)
@click.argument("bundle", type=click.Path(dir_okay=False))
@sign_key_option("Ed25519 private key (cachetool keygen) to sign with.", required=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write here instead of replacing BUNDLE.")
@json_option
def sign_cmd(bundle, sign_key, output, as_json):
    """Add (or replace) a signature on a .ctb bundle."""
    from cachetool import api

    r = api.sign(bundle, sign_key, output=output)
    return emit(as_json, r.to_json(), f"signed {r.output} with key {r.key_id}")


@cli.command("inspect", cls=OneLineCommand)
@click.argument("bundle")
@json_option
@click.option("--files", "show_files", is_flag=True, help="List every file.")
@platform_option
@store_options
def inspect_cmd(bundle, as_json, show_files, platform, endpoint_url, profile, insecure):
    """Show a bundle's keys, factors, fingerprint, ranks, files and sizes (nothing is verified). BUNDLE is a .ctb
    file or a ref (file:///dir/name:tag, s3://..., oci://...; only its manifest and signature are read)."""
    from cachetool import api

    info = api.inspect(bundle, platform=platform, store_options=options_dict(endpoint_url, profile, insecure))
    if as_json:
        return emit(True, info.to_json(), f"bundle {bundle}: {info.files} files, platform {info.platform}")
    b = info.bytes
    lines = [
        f"bundle    {bundle}",
        f"manifest  {info.manifest_digest}  (schema {info.schema}, cachetool {info.tool_version})",
        f"signed by {', '.join(info.signed_by) or 'UNSIGNED'}  (not verified; use `cachetool verify`)",
        f"layout    {info.layout}  save format {info.save_format or '-'}",
        f"platform  {info.platform}",
        "fingerprint " + " ".join(f"{k}={v}" for k, v in info.fingerprint.items() if v is not None),
    ]
    for k in info.keys:
        fac = k.get("factors") or {}
        hashes = " ".join(
            f"{n}={str(f.get('hash'))[:12]}"
            for n, f in fac.items()
            if isinstance(f, dict) and f.get("hash") is not None
        )
        lines.append(
            f"cache key {k['hash']} ({k['kind']}) {hashes or ('factors: none' if not fac else 'factors: raw')}"
        )
        lines += [f"  {line}" for line in info.key_lines.get(k["hash"], [])]  # the engine's words for it
    dedupe = (b.raw / b.unique) if b.unique else 1.0
    lines += [
        f"ranks     {', '.join(info.ranks) or '-'}  ({len(info.units)} install units)",
        f"files     {info.files} files, {info.unique_blobs} unique",
        f"bytes     raw {exact_size(b.raw)}, unique {exact_size(b.unique)}, dedupe x{dedupe:.2f}, "
        f"compressed blobs {exact_size(b.compressed)}",
    ]
    if show_files:
        lines += [f"  {f['mode']:04o} {f['size']:>12} {f['digest'][7:19]} {f['path']}" for f in info.file_list]
    click.echo("\n".join(lines))


@cli.command("verify", cls=OneLineCommand)
@click.argument("bundle")
@trust_option
@json_option
@platform_option
@store_options
def verify_cmd(bundle, trust, as_json, platform, endpoint_url, profile, insecure):
    """Check a bundle's signature against trusted keys and every blob against the manifest. BUNDLE is a .ctb file
    or a ref (its blobs are downloaded to a temporary folder and checked; nothing is installed)."""
    from cachetool import api

    r = api.verify(
        bundle,
        trust=list(trust) or None,
        platform=platform,
        store_options=options_dict(endpoint_url, profile, insecure),
    )
    return emit(
        as_json,
        r.to_json(),
        f"OK {bundle}: signed by trusted key {r.key_id}; {r.blobs} blobs, {r.files} files verified",
    )


@cli.command("install", cls=OneLineCommand)
@click.argument("bundle", type=click.Path(dir_okay=False))
@native_cache_root_option
@trust_option
@ranks_option
@device_option("Device the preflight compares the bundle against", "the bundle's")
@click.option("--no-preflight", is_flag=True, help="Skip comparing factors/fingerprint with this machine.")
@replace_options
@json_option
def install_cmd(
    bundle, cache_root, trust, ranks, device, no_preflight, force, keep_changed, insecure_skip_verify, as_json
):
    """Verify, preflight and atomically install a bundle into a cache root."""
    from cachetool import api

    r = api.install(
        bundle,
        cache_root or None,
        trust=list(trust) or None,
        insecure_skip_verify=insecure_skip_verify,
        ranks=ranks,
        preflight=not no_preflight,
        device=device,
        force=force,
        keep_changed=keep_changed,
        warn=warn_loud,
    )
    if r.units_installed:
        text = (
            f"installed {len(r.units_installed)} unit(s), {r.files} files ({human_size(r.bytes)}) into "
            f"{r.cache_root} in {r.seconds:.2f}s"
            + (f"; {len(r.units_present)} already present" if r.units_present else "")
        )
    else:
        text = f"already installed: {len(r.units_present)} unit(s) in {r.cache_root}"
    return emit(
        as_json,
        r.to_json(),
        text
        + f"\nmanifest {r.manifest_digest}; "
        + (f"signed by trusted key {r.key_id}" if r.verified else "SIGNATURE NOT VERIFIED")
        + (f"; preflight: {', '.join(r.preflight)}" if r.preflight else "; preflight skipped"),
    )


@cli.command("diff", cls=OneLineCommand, context_settings={"ignore_unknown_options": True})
@click.argument("a")
@click.argument("b")
@device_option("Device of `local`", "this machine's: cuda if it has a GPU, else cpu")
@json_option
@click.option(
    "--exit-code", is_flag=True, help=f"Exit {exit_codes.DIFFERS.code} when something differs (0 when nothing does)."
)
@click.option(
    "--engine",
    cls=WordedDefault,
    type=click.Choice(ENGINE_CHOICES),
    default=None,
    show_default="A's, by its layout",
    help="The engine of the `local` server: vllm compares vLLM's facts and, with --model and vLLM's "
    "flags after --, the key inputs vLLM computes for that server.",
)
@click.option("--model", "-m", default=None, help="--engine vllm: the server's model (folder or hub id).")
@platform_option
@store_options
@click.argument("engine_args", nargs=-1, type=click.UNPROCESSED)
def diff_cmd(a, b, device, as_json, exit_code, engine, model, platform, endpoint_url, profile, insecure, engine_args):
    """Name every hash factor that differs between A and B (bundle files, refs, cache folders or `local`); with
    --engine vllm, B is `local`: this machine and, with --model M -- FLAGS, the vLLM server those flags start."""
    from cachetool import api

    diffs = api.diff(
        a,
        b,
        device=device,
        engine=engine,
        model=model,
        flags=list(engine_args),
        platform=platform,
        store_options=options_dict(endpoint_url, profile, insecure),
    )
    code = exit_codes.DIFFERS.code if exit_code and diffs else 0
    if not diffs:
        text = message = "no differences: same factors and fingerprint"
    else:
        text = f"{len(diffs)} difference(s) (A={a}, B={b}):" + "".join("\n  " + d.line() for d in diffs)
        # the JSON message is one complete line: the count and the differences themselves (the first few)
        shown = "; ".join(d.line() for d in diffs[:3]) + (f"; and {len(diffs) - 3} more" if len(diffs) > 3 else "")
        message = f"{len(diffs)} difference(s) between A={a} and B={b}: {shown}"
    return emit(
        as_json,
        {
            "a": a,
            "b": b,
            "differs": bool(diffs),
            "message": message,
            "differences": [json.loads(json.dumps(d.to_json(), default=repr)) for d in diffs],
        },
        text,
        exit_code=code,
    )
