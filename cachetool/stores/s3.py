"""``s3://bucket/prefix``: bundles in S3 or an S3-compatible server (Ceph RGW, MinIO).

The keys of :mod:`cachetool.stores.object_store` under ``prefix/`` (docs/stores.md); this module is only the
object backend: get, put, conditional put (``If-Match`` / ``If-None-Match: *``), list, delete, stat.

Credentials come from boto3's standard chain (environment, ``AWS_PROFILE`` / ``profile=``, config files,
instance/role providers); ``endpoint_url`` (or ``AWS_ENDPOINT_URL``) points at an S3-compatible server.
Uploads use boto3's managed transfer (multipart, parallel parts above ``multipart_threshold``); each blob is
checked with HEAD before it is uploaded. Requests retry with exponential backoff (botocore "standard" mode,
``CACHETOOL_STORE_MAX_ATTEMPTS``, default 5). Downloads stream with a ``Range`` header so a partial file resumes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from cachetool import envs
from cachetool.errors import NotFoundError, StoreError, VerificationError, clip
from cachetool.stores.base import Capabilities, TransferCounters
from cachetool.stores.common import DL_CHUNK, download_resumable
from cachetool.stores.object_store import ObjectStore
from cachetool.stores.objects import ObjectBackend, ObjectInfo, StoredObject

_AUTH_CODES = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AccessDenied",
    "ExpiredToken",
    "InvalidToken",
    "TokenRefreshRequired",
    "AuthorizationHeaderMalformed",
    "403",
    "Forbidden",
    "InvalidSecurity",
}
_CREDENTIAL_VARS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
)  # a client per set of these (boto3 reads them)
_CLIENT_LOCK = threading.Lock()
_CLIENTS: dict = {}
MULTIPART_THRESHOLD = 32 << 20
MULTIPART_CHUNK = 16 << 20


def _read_bounded(resp: dict, limit: int, what: str, **fields) -> bytes:
    """The body of a get_object response, refusing one larger than ``limit`` before reading it into memory."""
    if int(resp.get("ContentLength") or 0) > limit:
        raise VerificationError(f"{what}: the object is larger than {limit >> 20} MiB", **fields)
    data = resp["Body"].read(limit + 1)
    if len(data) > limit:
        raise VerificationError(f"{what}: the object is larger than {limit >> 20} MiB", **fields)
    return data


_MISSING = ("NoSuchKey", "404", "NotFound")
_CONFLICT = ("PreconditionFailed", "412", "ConditionalRequestConflict", "409")


class S3Backend(ObjectBackend):
    ref_update = "conditional"
    conditional_delete = False  # Ceph RGW ignores If-Match on DELETE: a removed tag is an empty index instead

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        profile: str | None = None,
        region: str | None = None,
        max_attempts: int | None = None,
        max_concurrency: int = 8,
    ):
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.endpoint_url = endpoint_url or envs.get("AWS_ENDPOINT_URL_S3") or envs.get("AWS_ENDPOINT_URL")
        self.profile = profile
        self.region = region
        self.max_attempts = int(max_attempts or envs.store_max_attempts())
        self.max_concurrency = max_concurrency
        self.counters = TransferCounters()
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
        key = (
            self.profile,
            self.endpoint_url,
            self.region,
            self.max_attempts,
            self.max_concurrency,
            *(envs.raw(v) for v in _CREDENTIAL_VARS),
        )
        if key in _CLIENTS:
            return _CLIENTS[key]
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:  # the GPU image may lack boto3
            raise StoreError(f"s3:// stores need boto3 ({exc})", store=self.url) from None
        import botocore.exceptions as bexc

        try:
            session = boto3.session.Session(profile_name=self.profile)
        except bexc.ProfileNotFound:
            raise StoreError(f"AWS profile {self.profile!r} not found", store=self.url) from None
        region = self.region or session.region_name or "us-east-1"
        cfg = Config(
            retries={"max_attempts": self.max_attempts, "mode": "standard"},
            connect_timeout=10,
            read_timeout=60,
            max_pool_connections=max(10, self.max_concurrency * 2),
            s3={"addressing_style": "path" if self.endpoint_url else "auto"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        client = session.client("s3", endpoint_url=self.endpoint_url or None, region_name=region, config=cfg)
        # Clients are thread-safe and costly to make (~0.2 s): one per configuration per process.
        _CLIENTS[key] = client
        return client

    def close(self) -> None:
        self._client = None

    def _key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

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
                return NotFoundError(f"bucket {self.bucket!r} does not exist at {where}", **fields)
            if code in _MISSING and missing:
                return NotFoundError(missing, **fields)
            if code in _AUTH_CODES:
                return StoreError(
                    f"{what}: access denied by {where} ({code}): check the AWS credentials/profile", **fields
                )
            msg = err.get("Message") or ""
            return StoreError(f"{what}: {where} answered {code}{': ' + msg if msg else ''}", **fields)
        if isinstance(exc, bexc.NoCredentialsError):
            return StoreError(
                f"{what}: no AWS credentials found (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, "
                "AWS_PROFILE or a role)",
                **fields,
            )
        if isinstance(
            exc,
            (
                bexc.EndpointConnectionError,
                bexc.ConnectionClosedError,
                bexc.ReadTimeoutError,
                bexc.ConnectTimeoutError,
                bexc.ResponseStreamingError,
            ),
        ):
            return StoreError(
                f"{what}: cannot reach {where} ({type(exc).__name__}) after {self.max_attempts} attempts", **fields
            )
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

    def _unless_missing(self, what: str, full_key: str, call):
        """``call()``, or None when S3 answers that ``full_key`` does not exist; any other failure as ``_error``."""
        import botocore.exceptions as bexc

        try:
            return call()
        except bexc.ClientError as exc:
            if self._code(exc) in _MISSING:
                return None
            raise self._error(exc, what, key=full_key) from None
        except (bexc.BotoCoreError, ConnectionError) as exc:
            raise self._error(exc, what, key=full_key) from None

    @staticmethod
    def _code(exc) -> str:
        return str(exc.response.get("Error", {}).get("Code"))

    # ---------------------------------------------------------------------------------------------- operations
    def check(self) -> None:
        """NotFoundError / StoreError when the bucket is missing or the credentials are refused."""
        self._call(
            f"open {self.url}",
            self.client.head_bucket,
            Bucket=self.bucket,
            missing=f"bucket {self.bucket!r} does not exist at {self.endpoint_url or 'AWS'}",
        )

    def stat(self, key: str) -> ObjectInfo | None:
        full = self._key(key)
        h = self._unless_missing(
            f"check {key} in {self.url}", full, lambda: self.client.head_object(Bucket=self.bucket, Key=full)
        )
        if h is None:
            return None
        modified = h.get("LastModified")
        return ObjectInfo(key, int(h.get("ContentLength", -1)), modified.timestamp() if modified else 0.0)

    def get(self, key: str, limit: int, what: str) -> StoredObject | None:
        full = self._key(key)

        def read() -> tuple[dict, bytes]:
            resp = self.client.get_object(Bucket=self.bucket, Key=full)
            return resp, _read_bounded(resp, limit, what, store=self.url, key=full)

        got = self._unless_missing(what, full, read)
        if got is None:
            return None
        resp, data = got
        self.counters.down(len(data))
        return StoredObject(data, str(resp.get("ETag") or ""))

    def download(self, key: str, size: int, dest: Path, what: str, missing: str) -> None:
        import botocore.exceptions as bexc

        full = self._key(key)

        def open_from(offset: int):
            kw = {"Range": f"bytes={offset}-"} if offset else {}
            try:  # botocore has already retried connection errors and 5xx of the request itself
                resp = self.client.get_object(Bucket=self.bucket, Key=full, **kw)
            except bexc.ClientError as exc:
                if self._code(exc) == "InvalidRange":
                    return None  # the partial file is already whole (or longer): start over
                raise self._error(exc, what, missing, full) from None
            except (bexc.BotoCoreError, ConnectionError) as exc:
                raise self._error(exc, what, missing, full) from None
            body = resp["Body"]
            meta = resp.get("ResponseMetadata") or {}
            return (
                iter(lambda: body.read(DL_CHUNK), b""),
                int(meta.get("HTTPStatusCode") or 200),
                resp.get("ContentRange"),
            )

        download_resumable(
            dest,
            size,
            what,
            open_from,
            (bexc.BotoCoreError, ConnectionError),
            lambda exc: self._error(exc, what, missing, full),  # type: ignore[arg-type]  # baseline (issue 46)
            self.counters,
            self.max_attempts,
            {"store": self.url, "key": full},
        )

    def put(self, key: str, what: str, *, data: bytes | None = None, src: Path | None = None) -> None:
        if data is not None:
            self._call(
                what,
                self.client.put_object,
                Bucket=self.bucket,
                Key=self._key(key),
                Body=data,
                ContentType="application/json",
            )
            self.counters.up(len(data))
            return
        self._upload_file(self._key(key), Path(src), what)  # type: ignore[arg-type]  # baseline (issue 46)

    def _upload_file(self, full: str, src: Path, what: str) -> None:
        """boto3's managed transfer: multipart with parallel parts above MULTIPART_THRESHOLD."""
        from boto3.exceptions import S3UploadFailedError
        from boto3.s3.transfer import TransferConfig

        cfg = TransferConfig(
            multipart_threshold=MULTIPART_THRESHOLD,
            multipart_chunksize=MULTIPART_CHUNK,
            max_concurrency=self.max_concurrency,
            use_threads=True,
        )
        try:
            self._call(
                what,
                self.client.upload_file,
                str(src),
                self.bucket,
                full,
                ExtraArgs={"ContentType": "application/zstd"},
                Config=cfg,
            )
        except S3UploadFailedError as exc:  # boto3 wraps the ClientError; only its text says which
            text = str(exc)
            if "NoSuchBucket" in text:
                raise NotFoundError(
                    f"bucket {self.bucket!r} does not exist at {self.endpoint_url or 'AWS'}",
                    store=self.url,
                    key=full,
                    status="NoSuchBucket",
                ) from None
            code = next((c for c in _AUTH_CODES if f"({c})" in text), None)
            if code:
                raise StoreError(
                    f"{what}: access denied ({code}): check the AWS credentials/profile",
                    store=self.url,
                    key=full,
                    status=code,
                ) from None
            raise StoreError(f"{what}: {clip(text.rsplit(': ', 1)[-1])}", store=self.url, key=full) from None
        self.counters.up(src.stat().st_size)

    def put_if(self, key: str, data: bytes | None, version: str | None, what: str) -> bool:
        """``If-Match: <version>`` (``If-None-Match: *`` for a new object); a server without conditional writes
        gets a plain write. Some servers (Ceph RGW) compare If-Match without the quotes: detected once, when a
        412 comes for an object whose ETag did not change."""
        import botocore.exceptions as bexc

        if data is None:
            raise ValueError("S3 has no conditional delete: write an empty object instead")
        full = self._key(key)
        for _ in range(2):
            cond = (
                {"IfMatch": version.strip('"') if self._unquoted_etags else version}
                if version
                else {"IfNoneMatch": "*"}
            )
            try:
                self.client.put_object(Bucket=self.bucket, Key=full, Body=data, ContentType="application/json", **cond)
                self.counters.up(len(data))
                return True
            except bexc.ClientError as exc:
                code = self._code(exc)
                if code in ("NotImplemented", "501"):
                    self.put(key, what, data=data)
                    return True
                if code not in _CONFLICT:
                    raise self._error(exc, what, key=full) from None
                if not version or self._unquoted_etags or self._etag(full) != version:
                    return False  # another writer got in
                self._unquoted_etags = True
            except (bexc.BotoCoreError, ConnectionError) as exc:
                raise self._error(exc, what, key=full) from None
        return False

    def _etag(self, full: str) -> str | None:
        import botocore.exceptions as bexc

        try:
            return self.client.head_object(Bucket=self.bucket, Key=full).get("ETag")
        except bexc.ClientError:
            return None

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        import botocore.exceptions as bexc

        base = len(self._key(""))
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self._key(prefix))
            for page in pages:
                for obj in page.get("Contents", []):
                    yield ObjectInfo(obj["Key"][base:], int(obj.get("Size") or 0), obj["LastModified"].timestamp())
        except (bexc.BotoCoreError, bexc.ClientError, ConnectionError) as exc:
            raise self._error(exc, f"list {self.url}", key=self._key(prefix) or None) from None

    def delete(self, keys: Iterable[str], what: str) -> None:
        keys = [self._key(k) for k in keys]
        for i in range(0, len(keys), 1000):
            batch = [{"Key": k} for k in keys[i : i + 1000]]
            self._call(what, self.client.delete_objects, Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})


class S3Store(ObjectStore):
    """The S3 store: an :class:`ObjectStore` on an :class:`S3Backend`."""

    capabilities = Capabilities(frozenset({"blobs", "manifests", "signatures"}), S3Backend.ref_update)

    def __init__(self, bucket: str, prefix: str = "", **options):
        super().__init__(S3Backend(bucket, prefix, **options))

    @property
    def client(self):
        """The boto3 client (tests replace its methods to stage races and odd replies)."""
        return self.backend.client
