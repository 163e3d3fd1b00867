"""One store of each kind for a test (file; S3 on the run's Ceph RGW; OCI on its docker-registry), the signed bundles
the store and transfer tests push, and their isolation from the machine's keys and AWS and docker configuration:
fixtures that a folder's conftest.py imports with tests/signing_keys.py's ``keys`` (tests/stores, tests/transfer). A
module may replace ``isolated`` with an autouse fixture of its own of that name."""

from __future__ import annotations

import uuid

import pytest

from cachetool.bundle.fingerprint import local_fingerprint
from cachetool.bundle.packing import pack
from tests.cache_trees import CUDA_FP, isolate_environment, make_native_tree
from tests.server_run import server_run


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    """No pinned keys or docker/AWS config leak in from the machine running the tests; fail fast on a dead server."""
    isolate_environment(monkeypatch, tmp_path, store_attempts=2)
    for k in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture(scope="session")
def tree(tmp_path_factory):
    """A native cache tree (2 ranks, 16 layers; identical middle layers) with this machine's factors."""
    return make_native_tree(tmp_path_factory.mktemp("tree") / "root")


@pytest.fixture(scope="session")
def bundle(tree, keys):
    b = pack(tree, sign_key=keys["key"])
    yield b
    b.close()


@pytest.fixture(scope="session")
def cuda_bundle(tree, keys):
    """The same tree packed as if on an H200: another platform for multi-platform tags."""
    b = pack(tree, sign_key=keys["key"], fingerprint=dict(CUDA_FP))
    yield b
    b.close()


@pytest.fixture(scope="session")
def local_platform():
    from cachetool.bundle.manifest import platform_key

    return platform_key(local_fingerprint(device="cpu"))


@pytest.fixture(scope="session")
def shared_bucket(rgw) -> str:
    name = rgw.make_bucket("ct-stores")
    rgw.client().put_object(Bucket=name, Key="warm", Body=b"x")
    return name


class StoreKind:
    """One store of a kind for one test: ``store`` (URL), ``ref(tag, name)``, ``server`` (rgw/registry or None)."""

    def __init__(self, kind: str, store: str, server=None):
        self.kind, self.store, self.server = kind, store, server

    def ref(self, tag: str = "v1", name: str = "llama") -> str:
        if self.kind == "oci":
            return f"{self.store}:{tag}"
        return f"{self.store}/{name}:{tag}"


@pytest.fixture(params=["file", "s3", "oci"])
def any_store(request, tmp_path):
    return make_store(request.param, request, tmp_path)


@pytest.fixture(params=["s3", "oci"])
def stoppable_store(request, tmp_path, monkeypatch):
    """A remote store whose ``server`` is this test's own, to stop and start (the run's shared servers serve every
    worker): S3 through a gateway of its own on the shared cluster, OCI a registry of its own."""
    if request.param == "oci":
        reg = request.getfixturevalue("own_registry")
        return StoreKind("oci", f"{reg.url}/team/llama-{uuid.uuid4().hex[:6]}", reg)
    rgw, run = request.getfixturevalue("rgw"), server_run(request.config)
    bucket = request.getfixturevalue("shared_bucket")
    gateway = rgw.own_gateway(record=run.recorder("own-gateway"))
    request.addfinalizer(gateway.stop)
    request.getfixturevalue("s3_env")
    for k, v in gateway.env().items():
        monkeypatch.setenv(k, v)
    return StoreKind("s3", f"s3://{bucket}/team/{uuid.uuid4().hex[:8]}", gateway)


def make_store(kind, request, tmp_path) -> StoreKind:
    if kind == "file":
        return StoreKind("file", f"file://{tmp_path}/store")
    if kind == "s3":
        rgw = request.getfixturevalue("rgw")
        request.getfixturevalue("s3_env")
        bucket = request.getfixturevalue("shared_bucket")  # a new bucket costs ~2 s on its first write
        return StoreKind("s3", f"s3://{bucket}/team/{uuid.uuid4().hex[:8]}", rgw)
    reg = request.getfixturevalue("oci_registry")
    return StoreKind("oci", f"{reg.url}/team/llama-{uuid.uuid4().hex[:6]}", reg)
