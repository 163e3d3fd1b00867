"""Parse store URLs and bundle refs.

A *store* is where bundles live; a *ref* names one tag of one bundle name in a store::

    file:///abs/dir/NAME:TAG            store file:///abs/dir          (a local folder store)
    s3://BUCKET/PREFIX/NAME:TAG         store s3://BUCKET/PREFIX       (PREFIX may be empty or nested)
    oci://HOST[:PORT]/REPO/PATH:TAG     store oci://HOST[:PORT]/REPO/PATH (one OCI repository; NAME = its last part)

``:TAG`` defaults to ``latest``. A *digest pin* names one bundle exactly instead of a tag (``…/NAME@sha256:HEX``,
or ``…/NAME:TAG@sha256:HEX``, where the tag is only a label): on file and S3 stores the digest is the bundle
manifest's, on OCI the OCI manifest's or index's (what ``skopeo inspect`` and Kubernetes show); ``push`` prints it.
Anything else is a one-line :class:`cachetool.errors.UsageError`.
"""

from __future__ import annotations

import dataclasses
import re

from cachetool.errors import UsageError

DEFAULT_TAG = "latest"
SCHEMES = ("file", "s3", "oci")

# OCI distribution grammar (also used for file/s3 names and tags so a ref moves between stores unchanged).
TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
NAME_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_HOST_RE = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
    r"|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$"
)
_PREFIX_PART_RE = re.compile(r"^[A-Za-z0-9._-]+$")
_PIN_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclasses.dataclass(frozen=True)
class StoreURL:
    scheme: str  # "file" | "s3" | "oci"
    location: str  # file: absolute folder; s3: bucket; oci: host[:port]
    path: str  # file: "" ; s3: key prefix without slashes at the ends ("" = bucket root); oci: repository

    @property
    def url(self) -> str:
        if self.scheme == "file":
            return "file://" + self.location
        tail = f"/{self.path}" if self.path else ""
        return f"{self.scheme}://{self.location}{tail}"

    def __str__(self) -> str:
        return self.url


@dataclasses.dataclass(frozen=True)
class Ref:
    store: StoreURL
    name: str
    tag: str
    digest: str | None = None  # a pin: "sha256:<hex>"

    @property
    def url(self) -> str:
        at = f"@{self.digest}" if self.digest else f":{self.tag}"
        if self.store.scheme == "oci":
            return f"{self.store.url}{at}"
        return f"{self.store.url.rstrip('/')}/{self.name}{at}"

    @property
    def repository(self) -> str:
        """The ref without its tag or pin: the bundle name in its store (``file:///dir/name``)."""
        return self.store.url if self.store.scheme == "oci" else f"{self.store.url.rstrip('/')}/{self.name}"

    def pinned(self, digest: str) -> Ref:
        return dataclasses.replace(self, digest=digest)

    def __str__(self) -> str:
        return self.url


def _bad(text: str, why: str) -> UsageError:
    return UsageError(
        f"bad ref {text!r}: {why} (expected file:///dir/name:tag, s3://bucket/prefix/name:tag "
        "or oci://host[:port]/repo:tag)"
    )


# What a ref and a store URL of each scheme look like, for a message about one of them.
_FORMS = {
    "ref": {"file": "file:///dir/name:tag", "s3": "s3://bucket/prefix/name:tag", "oci": "oci://host[:port]/repo:tag"},
    "store": {"file": "file:///dir", "s3": "s3://bucket/prefix", "oci": "oci://host[:port]/repo"},
}


def _split_scheme(text: str, what: str = "ref") -> tuple[str, str]:
    if not isinstance(text, str) or "://" not in text:
        head, colon, _ = str(text).partition(":")
        if colon and head.lower() in SCHEMES:  # a known scheme with a malformed separator (s3:/bucket, file:/dir)
            raise UsageError(f"bad {what} {text}: expected {_FORMS[what][head.lower()]} ('://' after the scheme)")
        raise _bad(str(text), "no scheme")
    scheme, rest = text.split("://", 1)
    scheme = scheme.lower()
    if scheme not in SCHEMES:
        raise _bad(text, f"unknown scheme {scheme!r}")
    if any(c.isspace() or ord(c) < 32 for c in rest):
        raise _bad(text, "contains whitespace or a control character")
    return scheme, rest


def _check_tag(text: str, tag: str) -> str:
    if not TAG_RE.match(tag):
        raise _bad(text, f"tag {tag!r} is not valid (letters, digits, '_', '.', '-'; at most 128)")
    return tag


def _check_name(text: str, name: str) -> str:
    if not NAME_RE.match(name):
        raise _bad(text, f"name {name!r} is not valid (lowercase letters, digits, separated by '.', '_', '-')")
    return name


def _store_from(text: str, scheme: str, rest: str) -> StoreURL:
    if scheme == "file":
        if not rest.startswith("/"):
            raise _bad(text, "a file store needs an absolute path (file:///abs/dir)")
        path = "/" + rest.strip("/")
        if any(p in (".", "..") for p in path.split("/")):
            raise _bad(text, "'.' and '..' are not allowed in the path")
        return StoreURL("file", path, "")
    if scheme == "s3":
        bucket, _, prefix = rest.partition("/")
        if not _BUCKET_RE.match(bucket) or ".." in bucket:
            raise _bad(text, f"bucket {bucket!r} is not a valid S3 bucket name")
        prefix = prefix.strip("/")
        for part in prefix.split("/") if prefix else ():
            if not _PREFIX_PART_RE.match(part) or part in (".", ".."):
                raise _bad(text, f"prefix part {part!r} is not valid")
        return StoreURL("s3", bucket, prefix)
    host, _, repo = rest.partition("/")
    if not host or not _HOST_RE.match(host):
        raise _bad(text, f"registry host {host!r} is not valid")
    port = host.rsplit("]", 1)[-1].rpartition(":")[2] if ":" in host.rsplit("]", 1)[-1] else ""
    if port and not 0 < int(port) < 65536:
        raise _bad(text, f"port {port} is not in 1..65535")
    repo = repo.strip("/")
    if not repo:
        raise _bad(text, "an OCI store needs a repository (oci://host/repo)")
    for part in repo.split("/"):
        _check_name(text, part)
    return StoreURL("oci", host.lower(), repo)


def parse_store(text: str) -> StoreURL:
    """Parse a store URL (``file:///dir``, ``s3://bucket/prefix``, ``oci://host/repo``); no tag allowed."""
    scheme, rest = _split_scheme(text, "store")
    stripped = rest.rstrip("/")
    if scheme == "oci" and "/" in stripped and ":" in stripped.rsplit("/", 1)[-1]:
        raise _bad(text, "a store URL has no tag (use oci://host/repo)")
    return _store_from(text, scheme, rest)


def parse_ref(text: str) -> Ref:
    """Parse a bundle ref; ``:tag`` defaults to ``latest``."""
    scheme, rest = _split_scheme(text)
    if rest.endswith("/"):
        raise _bad(text, "no bundle name after the last '/'")
    head, _, last = rest.rpartition("/")
    if not head:
        raise _bad(text, "no store before the bundle name")
    digest = None
    if "@" in last:
        last, _, digest = last.partition("@")
        if not _PIN_RE.match(digest):
            raise _bad(text, f"digest {digest[:80]!r} is not sha256:<64 lowercase hex>")
    if last.count(":") > 1:
        raise _bad(text, "more than one ':' in the last part")
    name, sep, tag = last.partition(":")
    tag = _check_tag(text, tag) if sep else DEFAULT_TAG
    _check_name(text, name)
    if scheme == "oci":
        store = _store_from(text, scheme, f"{head}/{name}")
        return Ref(store, name, tag, digest)
    store = _store_from(text, scheme, head if scheme == "s3" else head or "/")
    return Ref(store, name, tag, digest)


def repository_named(text: str) -> Ref | None:
    """The bundle name a tagless file or S3 store URL may also be read as (``file:///dir/store/tiny``: ``tiny`` in
    the store ``file:///dir/store``), as a ref of its default tag; None where it cannot be one (an OCI store URL is
    one repository already; a tag, a pin, or a last part that is no valid name)."""
    scheme, rest = _split_scheme(text, "store")
    last = rest.rstrip("/").rsplit("/", 1)[-1]
    if scheme == "oci" or ":" in last or "@" in last or not NAME_RE.match(last) or "/" not in rest.strip("/"):
        return None
    return parse_ref(text.rstrip("/"))


def parse_store_or_ref(text: str) -> tuple[StoreURL, Ref | None]:
    """For ``ls``/``gc``: a store URL, or a ref (``...:tag``) whose store is meant. ``oci://host`` (a whole
    registry) is a store URL here with an empty repository: ``ls`` lists every repository."""
    scheme, rest = _split_scheme(text, "store")
    if scheme == "oci" and "/" not in rest.strip("/"):
        host = rest.strip("/")
        if not host or not _HOST_RE.match(host):
            raise _bad(text, f"registry host {host!r} is not valid")
        return StoreURL("oci", host.lower(), ""), None
    last = rest.rstrip("/").rsplit("/", 1)[-1]
    if ":" in last and not (scheme == "oci" and "/" not in rest.rstrip("/")):
        ref = parse_ref(text)
        return ref.store, ref
    return parse_store(text), None
