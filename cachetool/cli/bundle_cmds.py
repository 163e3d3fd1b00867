"""``cachetool pack | keygen | sign | inspect | verify | install | diff`` (see docs/bundles.md)."""

from __future__ import annotations

import json

import click

from cachetool.cli import cli
from cachetool.cli.common import (OneLineCommand, cache_root_default, cache_root_option, human_size, layout_option,
                                  os_errors_one_line, ranks_option, replace_options, trust_option, warn_loud)
from cachetool.engines import CHOICES as ENGINE_CHOICES
from cachetool.errors import UsageError


def _open_bundle(path: str):
    from cachetool.bundle import open_ctb

    return open_ctb(path)


@cli.command("pack", cls=OneLineCommand)
@click.argument("path", type=click.Path(file_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="The .ctb file to write.")
@click.option("--sign-key", type=click.Path(dir_okay=False), help="Ed25519 private key (from `cachetool keygen`).")
@layout_option()
@click.option("--level", type=click.IntRange(1, 22), default=3, show_default=True, help="zstd level.")
@os_errors_one_line
def pack_cmd(path, output, sign_key, layout, level):
    """Pack a cache (root, hash folder or rank folder) into a signed single-file bundle."""
    from cachetool.bundle import pack, write_ctb

    with pack(path, layout=layout, sign_key=sign_key, level=level) as b:
        out = write_ctb(b, output)
        m = b.manifest
        click.echo(
            f"packed {len(m.files)} files ({human_size(m.raw_size)}; {len(m.blobs)} unique, {human_size(m.unique_size)}; "
            f"{human_size(m.stored_size)} compressed) layout={m.layout} ranks={','.join(m.ranks) or '-'} -> {out}")
        click.echo(f"manifest {b.manifest_digest}  platform {b.platform}")
        if b.signature_bytes() is None:
            click.echo("unsigned: `cachetool sign` it before others can install it", err=True)
        else:
            from cachetool.signing import envelope_key_ids

            click.echo(f"signed by {', '.join(envelope_key_ids(b.signature_bytes()))}")


@cli.command("keygen", cls=OneLineCommand)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), metavar="NAME",
              help="Writes NAME (private key, mode 0600) and NAME.pub.")
@os_errors_one_line
def keygen_cmd(output):
    """Generate an Ed25519 signing key pair."""
    from cachetool.signing import generate_keypair

    priv, pub, kid = generate_keypair(output)
    click.echo(f"private key {priv} (keep secret)\npublic key  {pub}\nkey id      {kid}")


@cli.command("sign", cls=OneLineCommand)
@click.argument("bundle", type=click.Path(dir_okay=False))
@click.option("--key", "key", required=True, type=click.Path(dir_okay=False), help="Ed25519 private key.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write here instead of replacing BUNDLE.")
@os_errors_one_line
def sign_cmd(bundle, key, output):
    """Add (or replace) a signature on a .ctb bundle."""
    from cachetool.bundle import write_ctb
    from cachetool.signing import load_private_key, sign_manifest

    k = load_private_key(key)
    with _open_bundle(bundle) as b:
        env = sign_manifest(b.manifest_bytes(), k, existing_envelope=b.signature_bytes())
        signed = b.with_signature(env)
        # Extract blobs first: writing in place replaces the file we read from.
        try:
            for blob in signed.blobs:
                signed.blob_path(blob)
            out = write_ctb(signed, output or bundle)
        finally:
            signed.close()
    from cachetool.signing import key_id

    click.echo(f"signed {out} with key {key_id(k.public_key())}")


@cli.command("inspect", cls=OneLineCommand)
@click.argument("bundle", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--files", "show_files", is_flag=True, help="List every file.")
@os_errors_one_line
def inspect_cmd(bundle, as_json, show_files):
    """Show a bundle's keys, factors, fingerprint, ranks, files and sizes (nothing is verified)."""
    from cachetool.signing import envelope_key_ids

    with _open_bundle(bundle) as b:
        m = b.manifest
        sig = b.signature_bytes()
        info = {
            "file": str(bundle),
            "manifest_digest": b.manifest_digest,
            "schema": m.schema,
            "tool_version": m.tool_version,
            "layout": m.layout,
            "save_format": m.save_format,
            "platform": b.platform,
            "fingerprint": m.fingerprint,
            "signed_by": envelope_key_ids(sig) if sig else [],
            "keys": [k.to_json() for k in m.keys],
            "ranks": list(m.ranks),
            "units": [u.path for u in m.units],
            "files": len(m.files),
            "unique_blobs": len(m.blobs),
            "bytes": {"raw": m.raw_size, "unique": m.unique_size, "compressed": m.stored_size},
            "file_list": [f.to_json() for f in m.files],
        }
    if as_json:
        click.echo(json.dumps(info, indent=2, sort_keys=True))
        return
    click.echo(f"bundle    {bundle}")
    click.echo(f"manifest  {info['manifest_digest']}  (schema {m.schema}, cachetool {m.tool_version})")
    click.echo(f"signed by {', '.join(info['signed_by']) or 'UNSIGNED'}  (not verified; use `cachetool verify`)")
    click.echo(f"layout    {m.layout}  save format {m.save_format or '-'}")
    click.echo(f"platform  {b.platform}")
    click.echo("fingerprint " + " ".join(f"{k}={v}" for k, v in m.fingerprint.items() if v is not None))
    for k in m.keys:
        fac = k.factors or {}
        hashes = " ".join(f"{n}={str(f.get('hash'))[:12]}" for n, f in fac.items() if isinstance(f, dict) and "hash" in f)
        click.echo(f"cache key {k.hash} ({k.kind}) {hashes or ('factors: none' if not fac else 'factors: raw')}")
    click.echo(f"ranks     {', '.join(m.ranks) or '-'}  ({len(m.units)} install units)")
    dedupe = (m.raw_size / m.unique_size) if m.unique_size else 1.0
    click.echo(f"files     {len(m.files)} files, {len(m.blobs)} unique")
    click.echo(f"bytes     raw {m.raw_size} ({human_size(m.raw_size)}), unique {m.unique_size} ({human_size(m.unique_size)}, "
               f"dedupe x{dedupe:.2f}), compressed {m.stored_size} ({human_size(m.stored_size)})")
    if show_files:
        for f in m.files:
            click.echo(f"  {f.mode:04o} {f.size:>12} {f.digest[7:19]} {f.path}")


@cli.command("verify", cls=OneLineCommand)
@click.argument("bundle", type=click.Path(dir_okay=False))
@trust_option
@os_errors_one_line
def verify_cmd(bundle, trust):
    """Check a bundle's signature against trusted keys and every blob against the manifest."""
    from cachetool.install import verify_bundle

    with _open_bundle(bundle) as b:
        m, kid = verify_bundle(b, trust=list(trust) or None)
    click.echo(f"OK {bundle}: signed by trusted key {kid}; {len(m.blobs)} blobs, {len(m.files)} files verified")


@cli.command("install", cls=OneLineCommand)
@click.argument("bundle", type=click.Path(dir_okay=False))
@cache_root_option
@trust_option
@ranks_option
@click.option("--device", default=None, help="Device preflight compares against (default: the bundle's).")
@click.option("--no-preflight", is_flag=True, help="Skip comparing factors/fingerprint with this machine.")
@replace_options
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@os_errors_one_line
def install_cmd(bundle, cache_root, trust, ranks, device, no_preflight, force, keep_changed, insecure_skip_verify,
                as_json):
    """Verify, preflight and atomically install a bundle into a cache root."""
    from cachetool.install import install_bundle

    root = cache_root or cache_root_default()
    with _open_bundle(bundle) as b:
        r = install_bundle(b, root, trust=list(trust) or None, insecure_skip_verify=insecure_skip_verify,
                           ranks=ranks, preflight=not no_preflight, device=device, force=force,
                           keep_changed=keep_changed, warn=warn_loud)
    if as_json:
        click.echo(json.dumps(r.to_dict(), indent=2, sort_keys=True))
        return
    if r.units_installed:
        click.echo(f"installed {len(r.units_installed)} unit(s), {r.files} files ({human_size(r.bytes)}) into "
                   f"{r.cache_root} in {r.seconds:.2f}s"
                   + (f"; {len(r.units_present)} already present" if r.units_present else ""))
    else:
        click.echo(f"already installed: {len(r.units_present)} unit(s) in {r.cache_root}")
    click.echo(f"manifest {r.manifest_digest}; "
               + (f"signed by trusted key {r.key_id}" if r.verified else "SIGNATURE NOT VERIFIED")
               + (f"; preflight: {', '.join(r.preflight)}" if r.preflight else "; preflight skipped"))


@cli.command("diff", cls=OneLineCommand, context_settings={"ignore_unknown_options": True})
@click.argument("a")
@click.argument("b")
@click.option("--device", default=None, help="Device for `local` (default: cuda if available, else cpu).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (a, b, differs, differences).")
@click.option("--exit-code", is_flag=True, help="Exit 1 when something differs.")
@click.option("--engine", type=click.Choice(ENGINE_CHOICES), default="native", show_default=True,
              help="The engine of the `local` server: vllm compares vLLM's facts and, with --model and vLLM's "
                   "flags after --, the key inputs vLLM computes for that server.")
@click.option("--model", "-m", default=None, help="--engine vllm: the server's model (folder or hub id).")
@click.argument("engine_args", nargs=-1, type=click.UNPROCESSED)
@os_errors_one_line
def diff_cmd(a, b, device, as_json, exit_code, engine, model, engine_args):
    """Name every hash factor that differs between A and B (bundles, cache folders or `local`); with --engine
    vllm, B is `local`: this machine and, with --model M -- FLAGS, the vLLM server those flags start."""
    from cachetool.diff import diff_against_server, diff_sources

    if engine == "native":
        if model or engine_args:
            raise UsageError("--model and flags after -- on diff are for --engine vllm")
        diffs = diff_sources(a, b, device=device)
    else:
        if b != "local":
            raise UsageError(f"diff --engine {engine} compares A with this machine: B must be 'local'")
        diffs = diff_against_server(a, engine=engine, model=model, flags=list(engine_args), device=device)
    if as_json:
        click.echo(json.dumps({"a": a, "b": b, "differs": bool(diffs), "differences": [d.to_json() for d in diffs]},
                              indent=2, default=repr))
    elif not diffs:
        click.echo("no differences: same factors and fingerprint")
    else:
        click.echo(f"{len(diffs)} difference(s) (A={a}, B={b}):")
        for d in diffs:
            click.echo("  " + d.line())
    if exit_code and diffs:
        click.get_current_context().exit(1)
