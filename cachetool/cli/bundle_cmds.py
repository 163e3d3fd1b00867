"""``cachetool pack | keygen | sign | inspect | verify | install | diff`` (see docs/bundles.md)."""

from __future__ import annotations

import json

import click

from cachetool import exit_codes
from cachetool.cli import cli
from cachetool.cli.common import (OneLineCommand, cache_root_default, cache_root_option, human_size, json_option,
                                  layout_option, ranks_option, replace_options, sign_key_option, trust_option,
                                  warn_loud)
from cachetool.cli.output import emit
from cachetool.cli.store_options import options_dict, store_options
from cachetool.engines import CHOICES as ENGINE_CHOICES
from cachetool.errors import UsageError

platform_option = click.option("--platform", default=None, metavar="PLATFORM",
                               help="For a ref: the tag's bundle of this platform (default: the only one, else "
                                    "this machine's).")


def _open_bundle(spec: str, platform: str | None = None, store: dict | None = None):
    """A bundle file or a store ref (:mod:`cachetool.read_bundle`)."""
    from cachetool.read_bundle import open_bundle

    return open_bundle(spec, platform=platform, store_options=store)


@cli.command("pack", cls=OneLineCommand)
@click.argument("path", type=click.Path(file_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="The .ctb file to write.")
@sign_key_option("Ed25519 private key (cachetool keygen) that signs the bundle.")
@layout_option()
@click.option("--level", type=click.IntRange(1, 22), default=3, show_default=True, help="zstd level.")
@json_option
def pack_cmd(path, output, sign_key, layout, level, as_json):
    """Pack a cache (root, hash folder or rank folder) into a signed single-file bundle."""
    from cachetool.bundle import pack, write_ctb
    from cachetool.signing import envelope_key_ids

    with pack(path, layout=layout, sign_key=sign_key, level=level) as b:
        out = write_ctb(b, output)
        m = b.manifest
        signers = envelope_key_ids(b.signature_bytes()) if b.signature_bytes() is not None else []
        if not signers:
            click.echo("unsigned: `cachetool sign` it before others can install it", err=True)
        doc = {"output": str(out), "manifest_digest": b.manifest_digest, "platform": b.platform, "layout": m.layout,
               "ranks": list(m.ranks), "files": len(m.files), "unique_blobs": len(m.blobs), "signed_by": signers,
               "bytes": {"raw": m.raw_size, "unique": m.unique_size, "compressed": m.stored_size}}
        return emit(as_json, doc,
                    f"packed {len(m.files)} files ({human_size(m.raw_size)}; {len(m.blobs)} unique, "
                    f"{human_size(m.unique_size)}; {human_size(m.stored_size)} compressed) layout={m.layout} "
                    f"ranks={','.join(m.ranks) or '-'} -> {out}\n"
                    f"manifest {b.manifest_digest}  platform {b.platform}"
                    + (f"\nsigned by {', '.join(signers)}" if signers else ""))


@cli.command("keygen", cls=OneLineCommand)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), metavar="NAME",
              help="Writes NAME (private key, mode 0600) and NAME.pub.")
@json_option
def keygen_cmd(output, as_json):
    """Generate an Ed25519 signing key pair."""
    from cachetool.signing import generate_keypair

    priv, pub, kid = generate_keypair(output)
    return emit(as_json, {"private_key": str(priv), "public_key": str(pub), "key_id": kid},
                f"private key {priv} (keep secret)\npublic key  {pub}\nkey id      {kid}")


@cli.command("sign", cls=OneLineCommand)
@click.argument("bundle", type=click.Path(dir_okay=False))
@sign_key_option("Ed25519 private key (cachetool keygen) to sign with.", required=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write here instead of replacing BUNDLE.")
@json_option
def sign_cmd(bundle, sign_key, output, as_json):
    """Add (or replace) a signature on a .ctb bundle."""
    from cachetool.bundle import open_ctb, write_ctb
    from cachetool.signing import key_id, load_private_key, sign_manifest

    k = load_private_key(sign_key)
    with open_ctb(bundle) as b:
        env = sign_manifest(b.manifest_bytes(), k, existing_envelope=b.signature_bytes())
        signed = b.with_signature(env)
        # Extract blobs first: writing in place replaces the file we read from.
        try:
            for blob in signed.blobs:
                signed.blob_path(blob)
            out = write_ctb(signed, output or bundle)
        finally:
            signed.close()
    kid = key_id(k.public_key())
    return emit(as_json, {"output": str(out), "key_id": kid, "manifest_digest": b.manifest_digest},
                f"signed {out} with key {kid}")


@cli.command("inspect", cls=OneLineCommand)
@click.argument("bundle")
@json_option
@click.option("--files", "show_files", is_flag=True, help="List every file.")
@platform_option
@store_options
def inspect_cmd(bundle, as_json, show_files, platform, endpoint_url, profile, insecure):
    """Show a bundle's keys, factors, fingerprint, ranks, files and sizes (nothing is verified). BUNDLE is a .ctb
    file or a ref (file:///dir/name:tag, s3://..., oci://...; only its manifest and signature are read)."""
    from cachetool.signing import envelope_key_ids

    with _open_bundle(bundle, platform, options_dict(endpoint_url, profile, insecure)) as b:
        m = b.manifest
        sig = b.signature_bytes()
        info = {
            "bundle": str(bundle),
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
        return emit(True, info, f"bundle {bundle}: {len(m.files)} files, platform {info['platform']}")
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
@click.argument("bundle")
@trust_option
@json_option
@platform_option
@store_options
def verify_cmd(bundle, trust, as_json, platform, endpoint_url, profile, insecure):
    """Check a bundle's signature against trusted keys and every blob against the manifest. BUNDLE is a .ctb file
    or a ref (its blobs are downloaded to a temporary folder and checked; nothing is installed)."""
    from cachetool.install import verify_bundle

    with _open_bundle(bundle, platform, options_dict(endpoint_url, profile, insecure)) as b:
        m, kid = verify_bundle(b, trust=list(trust) or None)
        digest = b.manifest_digest
    return emit(as_json, {"bundle": bundle, "manifest_digest": digest, "key_id": kid, "blobs": len(m.blobs),
                          "files": len(m.files), "verified": True},
                f"OK {bundle}: signed by trusted key {kid}; {len(m.blobs)} blobs, {len(m.files)} files verified")


@cli.command("install", cls=OneLineCommand)
@click.argument("bundle", type=click.Path(dir_okay=False))
@cache_root_option
@trust_option
@ranks_option
@click.option("--device", default=None, help="Device preflight compares against (default: the bundle's).")
@click.option("--no-preflight", is_flag=True, help="Skip comparing factors/fingerprint with this machine.")
@replace_options
@json_option
def install_cmd(bundle, cache_root, trust, ranks, device, no_preflight, force, keep_changed, insecure_skip_verify,
                as_json):
    """Verify, preflight and atomically install a bundle into a cache root."""
    from cachetool.install import install_bundle

    root = cache_root or cache_root_default()
    from cachetool.bundle import open_ctb

    with open_ctb(bundle) as b:
        r = install_bundle(b, root, trust=list(trust) or None, insecure_skip_verify=insecure_skip_verify,
                           ranks=ranks, preflight=not no_preflight, device=device, force=force,
                           keep_changed=keep_changed, warn=warn_loud)
    if r.units_installed:
        text = (f"installed {len(r.units_installed)} unit(s), {r.files} files ({human_size(r.bytes)}) into "
                f"{r.cache_root} in {r.seconds:.2f}s"
                + (f"; {len(r.units_present)} already present" if r.units_present else ""))
    else:
        text = f"already installed: {len(r.units_present)} unit(s) in {r.cache_root}"
    return emit(as_json, r.to_dict(),
                text + f"\nmanifest {r.manifest_digest}; "
                + (f"signed by trusted key {r.key_id}" if r.verified else "SIGNATURE NOT VERIFIED")
                + (f"; preflight: {', '.join(r.preflight)}" if r.preflight else "; preflight skipped"))


@cli.command("diff", cls=OneLineCommand, context_settings={"ignore_unknown_options": True})
@click.argument("a")
@click.argument("b")
@click.option("--device", default=None, help="Device for `local` (default: cuda if available, else cpu).")
@json_option
@click.option("--exit-code", is_flag=True,
              help=f"Exit {exit_codes.DIFFERS.code} when something differs (0 when nothing does).")
@click.option("--engine", type=click.Choice(ENGINE_CHOICES), default="native", show_default=True,
              help="The engine of the `local` server: vllm compares vLLM's facts and, with --model and vLLM's "
                   "flags after --, the key inputs vLLM computes for that server.")
@click.option("--model", "-m", default=None, help="--engine vllm: the server's model (folder or hub id).")
@platform_option
@store_options
@click.argument("engine_args", nargs=-1, type=click.UNPROCESSED)
def diff_cmd(a, b, device, as_json, exit_code, engine, model, platform, endpoint_url, profile, insecure,
             engine_args):
    """Name every hash factor that differs between A and B (bundle files, refs, cache folders or `local`); with
    --engine vllm, B is `local`: this machine and, with --model M -- FLAGS, the vLLM server those flags start."""
    from cachetool.diff import diff_against_server, diff_sources

    reading = {"platform": platform, "store_options": options_dict(endpoint_url, profile, insecure)}
    if engine == "native":
        if model or engine_args:
            raise UsageError("--model and flags after -- on diff are for --engine vllm")
        diffs = diff_sources(a, b, device=device, reading=reading)
    else:
        if b != "local":
            raise UsageError(f"diff --engine {engine} compares A with this machine: B must be 'local'")
        diffs = diff_against_server(a, engine=engine, model=model, flags=list(engine_args), device=device,
                                    reading=reading)
    code = exit_codes.DIFFERS.code if exit_code and diffs else 0
    if not diffs:
        text = "no differences: same factors and fingerprint"
    else:
        text = f"{len(diffs)} difference(s) (A={a}, B={b}):" + "".join("\n  " + d.line() for d in diffs)
    return emit(as_json, {"a": a, "b": b, "differs": bool(diffs),
                          "differences": [json.loads(json.dumps(d.to_json(), default=repr)) for d in diffs]},
                text, exit_code=code)
