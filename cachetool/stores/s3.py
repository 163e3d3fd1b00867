"""``s3://bucket/prefix``: bundles in S3 or an S3-compatible server (Ceph RGW, MinIO).

Keys under ``prefix`` mirror the file store (docs/stores.md): ``blobs/sha256/<hex>``,
``manifests/sha256/<hex>.json``, ``signatures/sha256/<hex>.dsse.json``, ``refs/<name>/<tag>.json``.

Credentials come from boto3's standard chain (environment, ``AWS_PROFILE`` / ``profile=``, config files,
instance/role providers); ``endpoint_url`` (or ``AWS_ENDPOINT_URL``) points at an S3-compatible server.
Uploads use boto3's managed transfer (multipart, parallel parts above ``multipart_threshold``); each blob is
checked with HEAD before it is uploaded. Requests retry with exponential backoff (botocore "standard" mode,
``CACHETOOL_STORE_MAX_ATTEMPTS``, default 5). Downloads stream with a ``Range`` header so a partial file resumes.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Iterator

from cachetool.digests import hexof, sha256_bytes
from compiler import envs
from cachetool.errors import NotFoundError, StoreError, VerificationError
from cachetool.retry import pause
from cachetool.stores.common import (DL_CHUNK, MAX_MANIFEST, MAX_REF, MAX_SIGNATURE, Counters, download_resumable,
                                      index_from_json, index_to_json)
from cachetool.stores.base import GC_MIN_AGE_S, BlobRef, Capabilities, RefIndex, Store

_AUTH_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "ExpiredToken", "InvalidToken",
               "TokenRefreshRequired", "AuthorizationHeaderMalformed", "403", "Forbidden", "InvalidSecurity"}
_CREDENTIAL_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                    "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE")  # a client per set of these (boto3 reads them)
_CLIENT_LOCK = threading.Lock()
_CLIENTS: dict = {}
MULTIPART_THRESHOLD = 32 << 20
MULTIPART_CHUNK = 16 << 20


def _read_bounded(resp: dict, limit: int, what: str) -> bytes:
    """The body of a get_object response, refusing one larger than ``limit`` before reading it into memory."""
    if int(resp.get("ContentLength") or 0) > limit:
        raise VerificationError(f"{what}: the object is larger than {limit >> 20} MiB")
    data = resp["Body"].read(limit + 1)
    if len(data) > limit:
        raise VerificationError(f"{what}: the object is larger than {limit >> 20} MiB")
    return data


class S3Store(Store):
    capabilities = Capabilities(frozenset({"blobs", "manifests", "signatures"}), "conditional")

    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None, profile: str | None = None,
                 region: str | None = None, max_attempts: int | None = None, max_concurrency: int = 8):
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.endpoint_url = endpoint_url or envs.get("AWS_ENDPOINT_URL_S3") or envs.get("AWS_ENDPOINT_URL")
        self.profile = profile
        self.region = region
        self.max_attempts = int(max_attempts or envs.store_max_attempts())
        self.max_concurrency = max_concurrency
        self.counters = Counters()
        self._client = None
        self._unquoted_etags = False

    # ---------------------------------------------------------------------------------------------- plumbing
    @property
    def client(self):
        if self._client is None:
            with _CLIENT_LOCK:
                if self._client is None:
                    self._client = self._make_client()
        return self._client

    def _make_client(self):
        key = (self.profile, self.endpoint_url, self.region, self.max_attempts, self.max_concurrency,
               *(envs.raw(v) for v in _CREDENTIAL_VARS))
        if key in _CLIENTS:
            return _CLIENTS[key]
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:  # the GPU image may lack boto3
            raise StoreError(f"s3:// stores need boto3 ({exc})") from None
        import botocore.exceptions as bexc

        try:
            session = boto3.session.Session(profile_name=self.profile)
        except bexc.ProfileNotFound:
            raise StoreError(f"AWS profile {self.profile!r} not found") from None
        region = self.region or session.region_name or "us-east-1"
        cfg = Config(
            retries={"max_attempts": self.max_attempts, "mode": "standard"},
            connect_timeout=10, read_timeout=60, max_pool_connections=max(10, self.max_concurrency * 2),
            s3={"addressing_style": "path" if self.endpoint_url else "auto"},
            request_checksum_calculation="when_required", response_checksum_validation="when_required",
        )
        client = session.client("s3", endpoint_url=self.endpoint_url or None, region_name=region, config=cfg)
        # Clients are thread-safe and costly to make (~0.2 s): one per configuration per process.
        _CLIENTS[key] = client
        return client

    def close(self) -> None:
        self._client = None

    def _key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def _blob_key(self, blob: BlobRef) -> str:
        return self._key(f"blobs/sha256/{hexof(blob.stored_digest)}")

    def _manifest_key(self, digest: str) -> str:
        return self._key(f"manifests/sha256/{hexof(digest)}.json")

    def _sig_key(self, digest: str) -> str:
        return self._key(f"signatures/sha256/{hexof(digest)}.dsse.json")

    def _ref_key(self, name: str, tag: str) -> str:
        return self._key(f"refs/{name}/{tag}.json")

    def _error(self, exc: Exception, what: str, missing: str | None = None, key: str | None = None) -> Exception:
        """Map a boto error to a one-line cachetool error carrying ``store``, ``key`` and the S3 error code as
        ``status``. ``missing``: message for a 404 on the object ``key`` (a missing bucket has ``key`` None)."""
        import botocore.exceptions as bexc

        where = f"{self.url} ({self.endpoint_url})" if self.endpoint_url else self.url
        fields = {"store": self.url, "key": key}
        if isinstance(exc, bexc.ClientError):
            err = exc.response.get("Error", {}) or {}
            code = str(err.get("Code") or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or "")
            fields["status"] = code
            if code == "NoSuchBucket":
                return NotFoundError(f"bucket {self.bucket!r} does not exist at {where}", store=self.url, status=code)
            if code in ("NoSuchKey", "404", "NotFound") and missing:
                return NotFoundError(missing, **fields)
            if code in _AUTH_CODES:
                return StoreError(f"{what}: access denied by {where} ({code}): check the AWS credentials/profile",
                                  **fields)
            msg = err.get("Message") or ""
            return StoreError(f"{what}: {where} answered {code}{': ' + msg if msg else ''}", **fields)
        if isinstance(exc, bexc.NoCredentialsError):
            return StoreError(f"{what}: no AWS credentials found (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                              "AWS_PROFILE or a role)", **fields)
        if isinstance(exc, (bexc.EndpointConnectionError, bexc.ConnectionClosedError, bexc.ReadTimeoutError,
                            bexc.ConnectTimeoutError, bexc.ResponseStreamingError)):
            return StoreError(f"{what}: cannot reach {where} ({type(exc).__name__}) after {self.max_attempts} attempts",
                              **fields)
        if isinstance(exc, bexc.BotoCoreError):
            return StoreError(f"{what}: {where}: {exc}".replace("\n", " "), **fields)
        if isinstance(exc, (ConnectionError, OSError)):
            return StoreError(f"{what}: connection to {where} failed ({exc})".replace("\n", " "), **fields)
        return exc

    def _call(self, what: str, fn, *args, missing: str | None = None, **kwargs):
        import botocore.exceptions as bexc

        try:
            return fn(*args, **kwargs)
        except (bexc.BotoCoreError, bexc.ClientError, ConnectionError) as exc:
            raise self._error(exc, what, missing, kwargs.get("Key")) from None

    def _get_bytes(self, key: str, what: str, missing: str, limit: int = MAX_SIGNATURE) -> bytes:
        import botocore.exceptions as bexc

        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=key)
            data = _read_bounded(resp, limit, what)
        except (bexc.BotoCoreError, bexc.ClientError, ConnectionError) as exc:
            raise self._error(exc, what, missing, key) from None
        self.counters.down(len(data))
        return data

    def _put_bytes(self, key: str, data: bytes, what: str, content_type: str = "application/json") -> None:
        self._call(what, self.client.put_object, Bucket=self.bucket, Key=key, Body=data, ContentType=content_type)
        self.counters.up(len(data))

    def _exists(self, key: str, what: str) -> tuple[bool, int]:
        import botocore.exceptions as bexc

        try:
            h = self.client.head_object(Bucket=self.bucket, Key=key)
            return True, int(h.get("ContentLength", -1))
        except bexc.ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code"))
            if code in ("404", "NoSuchKey", "NotFound"):
                return False, 0
            raise self._error(exc, what) from None
        except (bexc.BotoCoreError, ConnectionError) as exc:
            raise self._error(exc, what) from None

    def check_bucket(self) -> None:
        """Raise NotFoundError / StoreError when the bucket is missing or the credentials are refused."""
        self._call(f"open {self.url}", self.client.head_bucket, Bucket=self.bucket,
                   missing=f"bucket {self.bucket!r} does not exist at {self.endpoint_url or 'AWS'}")

    # ---------------------------------------------------------------------------------------------- blobs
    def has_blob(self, blob: BlobRef) -> bool:
        ok, size = self._exists(self._blob_key(blob), f"check blob {blob.stored_digest[:19]} in {self.url}")
        return ok and size == blob.stored_size

    def put_blob(self, blob: BlobRef, stored_bytes_path: Path) -> None:
        from boto3.s3.transfer import TransferConfig

        cfg = TransferConfig(multipart_threshold=MULTIPART_THRESHOLD, multipart_chunksize=MULTIPART_CHUNK,
                             max_concurrency=self.max_concurrency, use_threads=True)
        from boto3.exceptions import S3UploadFailedError

        what = f"upload blob {blob.stored_digest[:19]} to {self.url}"
        try:
            self._call(what, self.client.upload_file, str(stored_bytes_path), self.bucket, self._blob_key(blob),
                       ExtraArgs={"ContentType": "application/zstd"}, Config=cfg)
        except S3UploadFailedError as exc:  # boto3 wraps the ClientError; only its text says which
            text = str(exc)
            if "NoSuchBucket" in text:
                raise NotFoundError(f"bucket {self.bucket!r} does not exist at {self.endpoint_url or 'AWS'}") from None
            code = next((c for c in _AUTH_CODES if f"({c})" in text), None)
            if code:
                raise StoreError(f"{what}: access denied ({code}): check the AWS credentials/profile") from None
            raise StoreError(f"{what}: {text.rsplit(': ', 1)[-1]}") from None
        self.counters.up(blob.stored_size)

    def get_blob(self, blob: BlobRef, dest: Path) -> None:
        import botocore.exceptions as bexc

        what = f"download blob {blob.stored_digest[:19]} from {self.url}"
        missing = f"blob {blob.stored_digest[:19]} is missing from store {self.url}"

        def open_from(offset: int):
            kw = {"Range": f"bytes={offset}-"} if offset else {}
            try:  # botocore has already retried connection errors and 5xx of the request itself
                resp = self.client.get_object(Bucket=self.bucket, Key=self._blob_key(blob), **kw)
            except bexc.ClientError as exc:
                if str(exc.response.get("Error", {}).get("Code")) == "InvalidRange":
                    return None  # the partial file is already whole (or longer): start over
                raise self._error(exc, what, missing, self._blob_key(blob)) from None
            except (bexc.BotoCoreError, ConnectionError) as exc:
                raise self._error(exc, what, missing, self._blob_key(blob)) from None
            body = resp["Body"]
            meta = resp.get("ResponseMetadata") or {}
            return (iter(lambda: body.read(DL_CHUNK), b""), int(meta.get("HTTPStatusCode") or 200),
                    resp.get("ContentRange"))

        download_resumable(Path(dest), blob.stored_size, what, open_from, (bexc.BotoCoreError, ConnectionError),
                           lambda exc: self._error(exc, what, missing, self._blob_key(blob)), self.counters,
                           self.max_attempts)

    # ---------------------------------------------------------------------------------------------- manifests
    def put_manifest(self, manifest_bytes: bytes, blobs: list[BlobRef]) -> str:
        digest = sha256_bytes(manifest_bytes)
        key = self._manifest_key(digest)
        what = f"upload manifest {digest[:19]} to {self.url}"
        if not self._exists(key, what)[0]:
            self._put_bytes(key, manifest_bytes, what)
        return digest

    def get_manifest(self, manifest_digest: str) -> bytes:
        return self._get_bytes(self._manifest_key(manifest_digest), f"download manifest from {self.url}",
                               f"manifest {manifest_digest[:19]} is missing from store {self.url}", MAX_MANIFEST)

    def put_signature(self, manifest_digest: str, envelope: bytes) -> None:
        self._put_bytes(self._sig_key(manifest_digest), envelope, f"upload signature to {self.url}")

    def get_signature(self, manifest_digest: str) -> bytes | None:
        key = self._sig_key(manifest_digest)
        try:
            return self._get_bytes(key, f"download signature from {self.url}",
                                   f"signature of {manifest_digest[:19]} is missing from store {self.url}")
        except NotFoundError as exc:
            if exc.key == key:  # the signature object is missing: unsigned (a missing bucket has no key)
                return None
            raise

    # ---------------------------------------------------------------------------------------------- refs
    def put_ref(self, index: RefIndex) -> None:
        self._put_bytes(self._ref_key(index.name, index.tag), index_to_json(index),
                        f"write ref {index.name}:{index.tag} to {self.url}")

    def update_ref(self, name, tag, update):
        """Optimistic concurrency: read the ref with its ETag, write with ``If-Match`` (or ``If-None-Match: *`` for a
        new tag), and on ``412 PreconditionFailed`` read, update and write again. Concurrent pushes of different
        platforms to one tag, and ``rm --platform`` next to a push, therefore keep every entry. Servers without
        conditional writes get a plain write.

        Removing the last entry writes an *empty* index conditionally (a tombstone that reads as "not found"):
        S3 has no delete that servers reliably make conditional (Ceph RGW ignores ``If-Match`` on DELETE), and an
        unconditional delete could drop a platform pushed between the read and the delete."""
        import botocore.exceptions as bexc

        ref = f"{self.url}/{name}:{tag}"
        key = self._ref_key(name, tag)
        for attempt in range(20):
            try:
                resp = self.client.get_object(Bucket=self.bucket, Key=key)
                data, etag = _read_bounded(resp, MAX_REF, f"read {ref}"), resp.get("ETag")
                old = index_from_json(data, ref)
                self.counters.down(len(data))
            except bexc.ClientError as exc:
                code = str(exc.response.get("Error", {}).get("Code"))
                if code not in ("NoSuchKey", "404"):
                    raise self._error(exc, f"read {ref}", f"{ref} not found", key) from None
                old, etag = None, None
            except (bexc.BotoCoreError, ConnectionError) as exc:
                raise self._error(exc, f"read {ref}", key=key) from None
            new = update(old)
            if new is None or not new.entries:
                if old is None:
                    return None
                new = RefIndex(name, tag, ())
            body = index_to_json(new)
            cond = ({"IfMatch": etag if not self._unquoted_etags else etag.strip('"')} if etag
                    else {"IfNoneMatch": "*"})
            try:
                self.client.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType="application/json", **cond)
                self.counters.up(len(body))
                return new if new.entries else None
            except bexc.ClientError as exc:
                code = str(exc.response.get("Error", {}).get("Code"))
                if code in ("NotImplemented", "501"):
                    self._put_bytes(key, body, f"write {ref}")
                    return new if new.entries else None
                if code not in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                    raise self._error(exc, f"write {ref}", key=key) from None
                if etag and not self._unquoted_etags:
                    # Some servers (Ceph RGW) compare If-Match without the quotes: if the object did not change,
                    # that was the reason; retry unquoted.
                    try:
                        cur = self.client.head_object(Bucket=self.bucket, Key=key).get("ETag")
                    except bexc.ClientError:
                        cur = None
                    if cur == etag:
                        self._unquoted_etags = True
                        continue
                # another push wrote the ref: merge again
                pause(f"write {ref}", attempt, "the ref changed under us", seconds=min(1.0, 0.05 * (attempt + 1)))
            except (bexc.BotoCoreError, ConnectionError) as exc:
                raise self._error(exc, f"write {ref}", key=key) from None
        raise StoreError(f"write {ref}: the ref kept changing under 20 attempts (concurrent pushes)")

    def get_ref(self, name: str, tag: str) -> RefIndex:
        ref = f"{self.url}/{name}:{tag}"
        data = self._get_bytes(self._ref_key(name, tag), f"read {ref}", f"{ref} not found (no such tag)", MAX_REF)
        index = index_from_json(data, ref)
        if not index.entries:  # the tombstone of a removed tag (see update_ref)
            raise NotFoundError(f"{ref} not found (no such tag; removed)")
        return index

    def _list(self, rel: str) -> Iterator[dict]:
        import botocore.exceptions as bexc

        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self._key(rel))
            for page in pages:
                yield from page.get("Contents", [])
        except (bexc.BotoCoreError, bexc.ClientError, ConnectionError) as exc:
            raise self._error(exc, f"list {self.url}") from None

    def list_refs(self) -> Iterator[RefIndex]:
        base = self._key("refs/")
        for obj in self._list("refs/"):
            rel = obj["Key"][len(base):]
            if rel.count("/") != 1 or not rel.endswith(".json"):
                continue
            name, tag = rel[:-5].split("/")
            index = index_from_json(self._get_bytes(obj["Key"], f"read {self.url}/{name}:{tag}", "gone"),
                                    f"{self.url}/{name}:{tag}")
            if index.entries:  # an empty index is a removed tag
                yield index

    def delete_ref(self, name: str, tag: str) -> None:
        key = self._ref_key(name, tag)
        try:
            self.get_ref(name, tag)  # a tombstone counts as missing
        except NotFoundError:
            raise NotFoundError(f"{self.url}/{name}:{tag} not found") from None
        self._call(f"delete {self.url}/{name}:{tag}", self.client.delete_object, Bucket=self.bucket, Key=key)

    def gc(self, dry_run: bool = False, older_than: float = GC_MIN_AGE_S) -> list[str]:
        from cachetool.stores.gc import reachable

        self.check_bucket()
        manifests, blobs = reachable(self)
        cutoff = time.time() - older_than
        doomed: list[str] = []
        for kind, keep in (("blobs", blobs), ("manifests", manifests), ("signatures", manifests)):
            base = self._key(f"{kind}/sha256/")
            for obj in self._list(f"{kind}/sha256/"):
                name = obj["Key"][len(base):]
                if name.split(".", 1)[0] in keep or obj["LastModified"].timestamp() > cutoff:
                    continue
                doomed.append(obj["Key"])
        if not dry_run:
            for i in range(0, len(doomed), 1000):
                batch = [{"Key": k} for k in doomed[i:i + 1000]]
                self._call(f"gc {self.url}", self.client.delete_objects, Bucket=self.bucket,
                           Delete={"Objects": batch, "Quiet": True})
        n = len(self._key(""))
        return [k[n:] for k in doomed]
