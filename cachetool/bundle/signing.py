"""Ed25519 signatures over manifests, in a DSSE envelope.

Envelope (https://github.com/secure-systems-lab/dsse), serialised as canonical JSON::

    {"payload": "<base64 of the manifest's canonical bytes>",
     "payloadType": "application/vnd.cachetool.manifest.v1+json",
     "signatures": [{"keyid": "<sha256 hex of the raw 32-byte public key>", "sig": "<base64 Ed25519 signature>"}]}

The signature is over DSSE's pre-authentication encoding ``PAE(payloadType, payload)``; the payload *is* the
manifest, so a verified envelope pins the manifest digest and, through it, every blob digest.

Keys are PEM files: the private key PKCS#8 (unencrypted, written 0600), the public key SubjectPublicKeyInfo in
``NAME.pub``. OpenSSH ``ssh-ed25519`` public keys are accepted too. ``cryptography`` is imported lazily.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cachetool.bundle.manifest import MEDIA_TYPE, canonical_json
from cachetool.errors import (
    BadSignatureError,
    KeyFileError,
    SignatureError,
    UnsignedError,
    UntrustedKeyError,
    UsageError,
)

PAYLOAD_TYPE = MEDIA_TYPE


def pae(payload_type: str, payload: bytes) -> bytes:
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def _raw_public(pub) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(public_key) -> str:
    """sha256 hex of the raw 32-byte Ed25519 public key."""
    return hashlib.sha256(_raw_public(public_key)).hexdigest()


@dataclasses.dataclass(frozen=True)
class PublicKey:
    key: Any  # cryptography Ed25519PublicKey
    keyid: str
    source: str  # where it came from, for messages


def generate_keypair(out: str | os.PathLike) -> tuple[Path, Path, str]:
    """Write ``out`` (private, 0600) and ``out.pub``; return (private path, public path, key id).

    Refuses to overwrite an existing key.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    priv_path = Path(out)
    pub_path = Path(str(out) + ".pub")
    for p in (priv_path, pub_path):
        if p.exists() or p.is_symlink():
            raise UsageError(f"{p} already exists; refusing to overwrite a key")
    _require_folder(priv_path.parent)
    key = Ed25519PrivateKey.generate()
    priv_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    pub_pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    fd = os.open(priv_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(priv_pem)
    os.chmod(priv_path, 0o600)
    try:
        fd = os.open(pub_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(pub_pem)
    except BaseException:
        priv_path.unlink(missing_ok=True)  # a private key without its public half is of no use: nothing is left
        raise
    return priv_path, pub_path, key_id(key.public_key())


def _require_folder(folder: Path) -> None:
    """The folder a key is written into must be there: keygen does not make folders (a typo would hide a key)."""
    if not folder.exists():
        raise UsageError(f"folder {folder} does not exist; create it first or write the key elsewhere (-o)")
    if not folder.is_dir():
        raise UsageError(f"{folder} is not a folder; the key cannot be written under it (-o)")


def _read_key_file(p: Path, what: str) -> bytes:
    """A key file's bytes; a missing or unreadable file is a one-line error naming it."""
    try:
        return p.read_bytes()
    except FileNotFoundError:
        raise KeyFileError(f"{what} {p} does not exist") from None
    except OSError as exc:
        raise KeyFileError(f"cannot read {what} {p}: {exc.strerror}") from None


def load_private_key(path: str | os.PathLike):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    p = Path(path)
    data = _read_key_file(p, "signing key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise UsageError(f"{p} is not a signing key: {_why_not_a_private_key(data)}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise UsageError(f"{p} is not an Ed25519 private key")
    return key


def _why_not_a_private_key(data: bytes) -> str:
    """Our own words for what cryptography refused (its message is long, generic and ends in a FAQ link)."""
    head = data[:4096].decode("ascii", "replace")
    if "-----BEGIN" not in head:
        return "it is not a PEM file (no -----BEGIN line); `cachetool keygen` writes one"
    if "ENCRYPTED" in head:
        return "it is encrypted with a passphrase; cachetool needs an unencrypted key (`cachetool keygen`)"
    if "PUBLIC KEY" in head:
        return "it is a public key; pass the private key (the file without .pub)"
    return "its PEM data does not parse as a private key (truncated or not a key)"


def _why_not_a_public_key(data: bytes) -> str:
    """Our own words for what cryptography refused of a public key file (its message ends in a FAQ link)."""
    head = data[:4096].decode("ascii", "replace").lstrip()
    kind = head.split(None, 1)[0] if head.startswith(("ssh-", "ecdsa-")) else ""
    if kind and kind != "ssh-ed25519":
        return f"it is an {kind} key (cachetool keys are Ed25519: `cachetool keygen` writes NAME.pub)"
    if kind:
        return "its ssh-ed25519 line does not parse (truncated, or not a key)"
    if "-----BEGIN" not in head:
        return "it is neither a PEM file (no -----BEGIN line) nor an ssh-ed25519 line (`cachetool keygen` writes one)"
    return "its PEM data does not parse as a public key (truncated, or not a key)"


def load_public_key(path: str | os.PathLike) -> PublicKey:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    p = Path(path)
    data = _read_key_file(p, "trusted key")
    key = None
    try:
        if data.lstrip().startswith(b"ssh-ed25519"):
            key = serialization.load_ssh_public_key(data.strip())
        else:
            key = serialization.load_pem_public_key(data)  # type: ignore[assignment]  # baseline (issue 46)
    except Exception:  # cryptography raises several types, with long generic messages
        if "PRIVATE KEY" in data[:200].decode("ascii", "replace"):
            raise UsageError(f"{p} is a private key; pass the public key ({p}.pub)") from None
        raise UsageError(f"{p} is not a trusted key: {_why_not_a_public_key(data)}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise UsageError(f"{p} is not an Ed25519 public key")
    return PublicKey(key, key_id(key), str(p))


def sign_manifest(manifest_bytes: bytes, private_key, existing_envelope: bytes | None = None) -> bytes:
    """Return a DSSE envelope (canonical JSON bytes) signing ``manifest_bytes``.

    With ``existing_envelope`` (for the same manifest) the new signature is added; one by the same key is replaced.
    """
    kid = key_id(private_key.public_key())
    sig = private_key.sign(pae(PAYLOAD_TYPE, manifest_bytes))
    sigs = []
    if existing_envelope is not None:
        env = parse_envelope(existing_envelope)
        if base64.b64decode(env["payload"]) != manifest_bytes:
            raise UsageError("the existing signature envelope is for a different manifest")
        sigs = [s for s in env["signatures"] if s.get("keyid") != kid]
    sigs.append({"keyid": kid, "sig": base64.b64encode(sig).decode()})
    sigs.sort(key=lambda s: s["keyid"])
    return canonical_json(
        {
            "payload": base64.b64encode(manifest_bytes).decode(),
            "payloadType": PAYLOAD_TYPE,
            "signatures": sigs,
        }
    )


_ENVELOPE_FIELDS = {"payload", "payloadType", "signatures"}
_SIGNATURE_FIELDS = {"keyid", "sig"}
_KEYID_RE = re.compile(r"^[\x21-\x7e]{0,128}$")


def parse_envelope(envelope: bytes) -> dict:
    """Parse a DSSE envelope strictly: exactly payload, payloadType and signatures (each exactly keyid and sig)."""
    if len(envelope) > 1 << 30:
        raise SignatureError("signature envelope is larger than 1 GiB")
    try:
        env = json.loads(envelope)
    except (UnicodeDecodeError, ValueError):
        raise SignatureError("signature envelope is not valid JSON") from None
    except RecursionError:
        raise SignatureError("signature envelope JSON is nested too deeply") from None
    if (
        not isinstance(env, dict)
        or not isinstance(env.get("payload"), str)
        or not isinstance(env.get("payloadType"), str)
        or not isinstance(env.get("signatures"), list)
    ):
        raise SignatureError("signature envelope is not a DSSE envelope (payload, payloadType, signatures)")
    if set(env) != _ENVELOPE_FIELDS:
        raise SignatureError(f"signature envelope has unknown field(s) {_names(set(env) - _ENVELOPE_FIELDS)}")
    for s in env["signatures"]:
        if (
            not isinstance(s, dict)
            or set(s) != _SIGNATURE_FIELDS
            or not all(isinstance(v, str) for v in s.values())
            or not _KEYID_RE.match(s["keyid"])
        ):
            raise SignatureError(
                "signature entry is malformed (each needs exactly 'keyid' and 'sig', both strings; "
                "a key id is at most 128 printable ASCII characters)"
            )
    return env


def _names(names) -> str:
    return repr(sorted(str(n)[:40] for n in names)[:5])


def envelope_key_ids(envelope: bytes) -> list[str]:
    env = parse_envelope(envelope)
    return [s["keyid"] for s in env["signatures"]]


def verify_envelope(envelope: bytes | None, manifest_bytes: bytes, trusted: Iterable[PublicKey]) -> PublicKey:
    """Check that ``envelope`` carries a valid signature over ``manifest_bytes`` by one of ``trusted``.

    Returns the key that verified. Raises :class:`UnsignedError`, :class:`UntrustedKeyError`,
    :class:`BadSignatureError` or :class:`SignatureError` with a one-line message.
    """
    from cryptography.exceptions import InvalidSignature

    trusted = list(trusted)
    if envelope is None:
        # no flag named here: which flags a caller has is the caller's (install and pull add theirs)
        raise UnsignedError("bundle is not signed (sign it with `cachetool sign`)")
    env = parse_envelope(envelope)
    if env["payloadType"] != PAYLOAD_TYPE:
        raise SignatureError(f"signature payloadType {env['payloadType']!r} is not {PAYLOAD_TYPE}")
    try:
        payload = base64.b64decode(env["payload"], validate=True)
    except ValueError:
        raise SignatureError("signature payload is not base64") from None
    if payload != manifest_bytes:
        raise BadSignatureError("signature is for a different manifest (manifest changed after signing)")
    if not env["signatures"]:
        raise UnsignedError("signature envelope holds no signatures")
    if not trusted:
        raise UntrustedKeyError(
            "no trusted keys configured (use --trust PUB, CACHETOOL_TRUSTED_KEYS or ~/.config/cachetool/trusted_keys/)"
        )
    by_id = {k.keyid: k for k in trusted}
    message = pae(PAYLOAD_TYPE, manifest_bytes)
    verified = None
    # Every signature that claims a trusted key must verify, wherever it stands in the list: the answer does not
    # depend on the order of the entries.
    for s in env["signatures"]:
        k = by_id.get(s["keyid"])
        if k is None:
            continue
        try:
            sig = base64.b64decode(s["sig"], validate=True)
            k.key.verify(sig, message)
        except (ValueError, InvalidSignature):
            raise BadSignatureError(f"signature by trusted key {k.keyid} does not verify") from None
        verified = verified or k
    if verified is not None:
        return verified
    seen_ids = [s["keyid"] for s in env["signatures"]]
    raise UntrustedKeyError(
        f"bundle is signed by untrusted key(s) {', '.join(seen_ids[:8])}; trusted: "
        f"{', '.join(k.keyid for k in trusted)}"
    )
