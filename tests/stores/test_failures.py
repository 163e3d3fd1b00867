"""Failures through the real servers: wrong credentials, missing bucket/repository, unknown tag (one-line errors
with the documented exit codes); the server stopped mid-pull (clear error, nothing installed, the rerun after a
restart completes and reuses what arrived); an interrupted blob resumed with a Range request; a blob corrupted
inside the store (detected, nothing installed); skopeo reads what we push."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
import uuid

import pytest

from cachetool.api import pull
from cachetool.cache_root import PARTIAL_DIR
from cachetool.digests import hexof
from cachetool.errors import StoreError, VerificationError
from cachetool.stores import open_store
from cachetool.transfer.push import push
from tests.cache_trees import tree_snapshot


def _installed(root) -> bool:
    return (root / "torch_compile_cache").exists()


# ------------------------------------------------------------------------------------------- one-line errors
def test_s3_wrong_credentials_missing_bucket_unknown_tag(
    rgw, s3_env, shared_bucket, bundle, keys, cli, tmp_path, monkeypatch
):
    store = f"s3://{shared_bucket}/errors-{uuid.uuid4().hex[:6]}"
    assert cli("push", _ctb(bundle, tmp_path), f"{store}/llama:v1").rc == 0

    r = cli("pull", f"{store}/llama:nope", "--cache-root", tmp_path / "r", "--trust", keys["pub"])
    assert r.rc == 5 and "no such tag" in r.error_line(), r
    r = cli("pull", "s3://ct-no-such-bucket/x/llama:v1", "--cache-root", tmp_path / "r", "--trust", keys["pub"])
    assert r.rc == 5 and "bucket 'ct-no-such-bucket' does not exist" in r.error_line(), r
    r = cli("push", _ctb(bundle, tmp_path), "s3://ct-no-such-bucket/x/llama:v1")
    assert r.rc == 5 and "does not exist" in r.error_line(), r
    r = cli("ls", "s3://ct-no-such-bucket/x")
    assert r.rc == 5, r

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
    r = cli("pull", f"{store}/llama:v1", "--cache-root", tmp_path / "r", "--trust", keys["pub"])
    assert r.rc == 6 and "access denied" in r.error_line() and "SignatureDoesNotMatch" in r.err, r
    r = cli("push", _ctb(bundle, tmp_path), f"{store}/llama:v2")
    assert r.rc == 6 and "access denied" in r.error_line(), r
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "NOSUCHKEY")
    r = cli("ls", store)
    assert r.rc == 6 and "InvalidAccessKeyId" in r.error_line(), r
    assert not (tmp_path / "r").exists()


def test_s3_profile_and_endpoint_flag(rgw, shared_bucket, bundle, keys, cli, tmp_path, monkeypatch):
    """Credentials from a named profile in the shared credentials file; the endpoint from --endpoint-url."""
    creds = tmp_path / "aws-credentials"
    creds.write_text(f"[ceph]\naws_access_key_id = {rgw.access_key}\naws_secret_access_key = {rgw.secret_key}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    ref = f"s3://{shared_bucket}/profile-{uuid.uuid4().hex[:6]}/llama:v1"
    r = cli("push", _ctb(bundle, tmp_path), ref, "--profile", "ceph", "--endpoint-url", rgw.endpoint, "--json")
    assert r.rc == 0, r
    r = cli(
        "pull",
        ref,
        "--cache-root",
        tmp_path / "root",
        "--trust",
        keys["pub"],
        "--profile",
        "ceph",
        "--endpoint-url",
        rgw.endpoint,
    )
    assert r.rc == 0, r
    r = cli("ls", ref.rsplit("/", 1)[0], "--profile", "nope", "--endpoint-url", rgw.endpoint)
    assert r.rc == 6 and "profile 'nope' not found" in r.error_line(), r


def test_oci_missing_repository_and_unknown_tag(oci_registry, bundle, keys, cli, tmp_path):
    repo = f"{oci_registry.url}/team/errors-{uuid.uuid4().hex[:6]}"
    r = cli("pull", f"{oci_registry.url}/team/no-such-repo:v1", "--cache-root", tmp_path / "r", "--trust", keys["pub"])
    assert r.rc == 5 and "repository 'team/no-such-repo' not found" in r.error_line(), r
    assert cli("push", _ctb(bundle, tmp_path), f"{repo}:v1").rc == 0
    r = cli("pull", f"{repo}:nope", "--cache-root", tmp_path / "r", "--trust", keys["pub"])
    assert r.rc == 5 and "no such tag" in r.error_line(), r
    r = cli("rm", f"{repo}:nope")
    assert r.rc == 5, r
    assert not (tmp_path / "r").exists()


def test_oci_login_from_docker_config(oci_registry_auth, bundle, keys, cli, tmp_path, monkeypatch):
    reg = oci_registry_auth
    ref = f"{reg.url}/team/private:v1"
    ctb = _ctb(bundle, tmp_path)
    # no login at all
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "none"))
    r = cli("push", ctb, ref)
    assert r.rc == 6 and "wants a login" in r.error_line(), r
    # a wrong password
    monkeypatch.setenv("DOCKER_CONFIG", str(reg.docker_config(tmp_path / "bad", password="wrong")))
    r = cli("push", ctb, ref)
    assert r.rc == 6 and "access denied" in r.error_line(), r
    # the right one (Basic auth from config.json)
    monkeypatch.setenv("DOCKER_CONFIG", str(reg.docker_config(tmp_path / "good")))
    r = cli("push", ctb, ref, "--json")
    assert r.rc == 0, r
    r = cli("pull", ref, "--cache-root", tmp_path / "root", "--trust", keys["pub"])
    assert r.rc == 0, r


# ------------------------------------------------------------------------------------------- interop
@pytest.mark.skipif(shutil.which("skopeo") is None, reason="skopeo is not installed")
def test_skopeo_reads_the_pushed_artifact(oci_registry, bundle, cuda_bundle):
    repo = f"team/skopeo-{uuid.uuid4().hex[:6]}"
    ref = f"{oci_registry.url}/{repo}:v1"
    push(cuda_bundle, ref)
    push(bundle, ref)

    def raw(target: str) -> dict:
        p = subprocess.run(
            ["skopeo", "inspect", "--tls-verify=false", "--raw", f"docker://{oci_registry.host}/{target}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    index = raw(f"{repo}:v1")
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    assert index["artifactType"] == "application/vnd.cachetool.bundle.v1+json"
    by_platform = {m["annotations"]["dev.cachetool.platform"]: m for m in index["manifests"]}
    assert set(by_platform) == {bundle.platform, cuda_bundle.platform}
    entry = by_platform[bundle.platform]
    assert entry["annotations"]["dev.cachetool.manifest.digest"] == bundle.manifest_digest
    assert entry["platform"]["os"] == "linux"

    manifest = raw(f"{repo}@{entry['digest']}")
    assert manifest["artifactType"] == "application/vnd.cachetool.bundle.v1+json"
    assert manifest["config"]["digest"] == bundle.manifest_digest  # our manifest is the config blob
    layers = {l["digest"]: l for l in manifest["layers"]}
    for b in bundle.blobs:
        l = layers[b.stored_digest]
        assert l["mediaType"] == "application/vnd.cachetool.blob.v1+zstd" and l["size"] == b.stored_size
        assert l["annotations"]["dev.cachetool.content.digest"] == b.digest

    # the signature is an OCI 1.1 referrer, listed under the referrers tag schema's tag (no referrers API here)
    referrers = raw(f"{repo}:sha256-{hexof(entry['digest'])}")
    assert [m["artifactType"] for m in referrers["manifests"]] == ["application/vnd.cachetool.signature.v1+json"]
    sig = raw(f"{repo}@{referrers['manifests'][0]['digest']}")
    assert sig["subject"]["digest"] == entry["digest"]
    assert sig["layers"][0]["mediaType"] == "application/vnd.dsse.envelope.v1+json"


# ------------------------------------------------------------------------------------------- interruptions
class StopAfter:
    """Wrap a store's get_blob: stop the server when the n-th blob download starts."""

    def __init__(self, store, server, n: int):
        self.store, self.server, self.n = store, server, n
        self.calls = 0
        self.lock = threading.Lock()
        self.orig = store.get_blob
        store.get_blob = self

    def __call__(self, blob, dest):
        with self.lock:
            self.calls += 1
            if self.calls == self.n:
                self.server.stop()
        return self.orig(blob, dest)


def test_server_stopped_mid_pull_then_rerun_completes(stoppable_store, bundle, keys, tree, tmp_path):
    ref = stoppable_store.ref("v1")
    push(bundle, ref)
    root = tmp_path / "root"
    st = open_store(stoppable_store.store)
    stopper = StopAfter(st, stoppable_store.server, 4)
    try:
        with pytest.raises(StoreError) as ei:
            pull(ref, root, trust=[keys["pub"]], store=st, workers=1)
    finally:
        stoppable_store.server.start()
    msg = str(ei.value)
    assert "\n" not in msg and ("cannot reach" in msg or "cut" in msg), msg
    assert not _installed(root)
    kept = list((root / PARTIAL_DIR).iterdir())
    assert len(kept) == 3  # the blobs that arrived before the stop are kept for the rerun
    assert stopper.calls == 4

    p = pull(ref, root, trust=[keys["pub"]])
    assert p.blobs_reused == 3 and p.blobs_downloaded == len(bundle.blobs) - 3
    assert tree_snapshot(root) == tree_snapshot(tree)
    assert not (root / PARTIAL_DIR).exists()


@pytest.mark.usefixtures("blobs_on_disk")
def test_interrupted_blob_resumes_with_a_range_request(any_store, bundle, keys, tree, tmp_path):
    ref = any_store.ref("v1")
    push(bundle, ref)
    blob = max(bundle.blobs, key=lambda b: b.stored_size)
    data = bundle.blob_path(blob).read_bytes()
    half = len(data) // 2
    with open_store(any_store.store) as st:
        dest = tmp_path / "partial"
        dest.write_bytes(data[:half])
        st.get_blob(blob, dest)
        assert dest.read_bytes() == data
        assert st.counters.bytes_down == len(data) - half and st.counters.blobs_resumed == 1

    # through pull: a half blob left by an interrupted run is completed, not downloaded again
    root = tmp_path / "root"
    (root / PARTIAL_DIR).mkdir(parents=True)
    (root / PARTIAL_DIR / hexof(blob.stored_digest)).write_bytes(data[:half])
    p = pull(ref, root, trust=[keys["pub"]])
    assert p.blobs_resumed == 1 and p.blobs_downloaded == len(bundle.blobs)
    assert tree_snapshot(root) == tree_snapshot(tree)


@pytest.mark.usefixtures("blobs_on_disk")
def test_bad_partial_left_behind_is_refetched(bundle, keys, tree, tmp_path):
    store = f"file://{tmp_path}/store"
    push(bundle, f"{store}/llama:v1")
    blob = max(bundle.blobs, key=lambda b: b.stored_size)
    root = tmp_path / "root"
    (root / PARTIAL_DIR).mkdir(parents=True)
    (root / PARTIAL_DIR / hexof(blob.stored_digest)).write_bytes(b"garbage")
    pull(f"{store}/llama:v1", root, trust=[keys["pub"]])
    assert tree_snapshot(root) == tree_snapshot(tree)


def _corrupt(kind: str, store_url: str, server, blob) -> None:
    hexd = hexof(blob.stored_digest)
    if kind == "file":
        p = store_url[len("file://") :] + f"/blobs/sha256/{hexd}"
    elif kind == "oci":
        p = server.data_dir / "docker/registry/v2/blobs/sha256" / hexd[:2] / hexd / "data"
    else:
        bucket, prefix = store_url[len("s3://") :].split("/", 1)
        c = server.client()
        key = f"{prefix}/blobs/sha256/{hexd}"
        body = bytearray(c.get_object(Bucket=bucket, Key=key)["Body"].read())
        body[len(body) // 2] ^= 0xFF
        c.put_object(Bucket=bucket, Key=key, Body=bytes(body))
        return
    from pathlib import Path

    data = bytearray(Path(p).read_bytes())
    data[len(data) // 2] ^= 0xFF
    Path(p).write_bytes(bytes(data))


def test_blob_corrupted_in_the_store_is_detected(any_store, keys, tmp_path, cli):
    from cachetool.bundle.packing import pack
    from tests.cache_trees import make_native_tree

    # a bundle of its own: the corruption must not reach other tests through shared blobs
    src = make_native_tree(tmp_path / "src", layers=4)
    rank = next(src.glob("torch_compile_cache/*/rank_0_0/backbone"))
    unique = os.urandom(20000)  # content no other test has: registries share blobs across repositories
    (rank / "artifact_1").write_bytes(unique)
    with pack(src, sign_key=keys["key"]) as b:
        ref = any_store.ref("v1")
        push(b, ref)
        victim = next(x for x in b.blobs if x.digest == "sha256:" + hashlib.sha256(unique).hexdigest())
        _corrupt(any_store.kind, any_store.store, any_store.server, victim)
    root = tmp_path / "root"
    with pytest.raises(VerificationError) as ei:
        pull(ref, root, trust=[keys["pub"]])
    assert victim.digest[:19] in str(ei.value)
    assert not _installed(root) and not (root / PARTIAL_DIR).exists()
    r = cli("pull", ref, "--cache-root", root, "--trust", keys["pub"])
    assert r.rc == 3 and "tampered" in r.error_line(), r
    assert not _installed(root)


def _ctb(bundle, tmp_path):
    from cachetool.bundle.ctb import write_ctb

    p = tmp_path / "bundle.ctb"
    if not p.exists():
        write_ctb(bundle, p)
    return p


# ------------------------------------------------------------------------------------------- ref races
@pytest.fixture(params=["file", "s3"])
def file_or_s3(request, tmp_path):
    from tests.store_kinds import StoreKind

    if request.param == "file":
        return StoreKind("file", f"file://{tmp_path}/store")
    rgw = request.getfixturevalue("rgw")
    request.getfixturevalue("s3_env")
    return StoreKind("s3", f"s3://{request.getfixturevalue('shared_bucket')}/race-{uuid.uuid4().hex[:8]}", rgw)


def test_rm_platform_keeps_a_platform_pushed_at_the_same_moment(file_or_s3, bundle, cuda_bundle, monkeypatch):
    """``rm --platform`` read the ref and wrote it back outside update_ref: a push landing between its read and its
    write was dropped. Here the push of platform Y runs exactly when the removal of Z writes the ref."""
    from cachetool.refs.admin import remove
    from cachetool.stores.base import RefEntry
    from cachetool.transfer.push import merge_index

    ref = file_or_s3.ref("v1")
    push(bundle, ref)
    push(cuda_bundle, ref)  # X = the CPU platform, Z = the CUDA one
    y = RefEntry(cuda_bundle.manifest_digest, "cuda-sm100-torch2.11.0+cu130", {}, 1, "2026-01-01T00:00:00Z")

    def push_y() -> None:
        with open_store(file_or_s3.store) as other:
            other.update_ref("llama", "v1", lambda old: merge_index(old, "llama", "v1", y))

    remover = open_store(file_or_s3.store)
    fired = []
    main = threading.current_thread()

    def race() -> None:
        if not fired and threading.current_thread() is main:
            fired.append(1)
            t = threading.Thread(target=push_y)
            t.start()
            t.join(timeout=2)  # the file store's lock makes the push wait for the removal; S3 lets it land
            fired.append(t)

    if file_or_s3.kind == "file":
        orig = remover.backend.put_if

        def put_if(key, data, version, what):
            if key == "refs/llama/v1.json":
                race()
            return orig(key, data, version, what)

        remover.backend.put_if = put_if
    else:
        client = remover.client
        orig = client.put_object

        def put_object(**kw):
            if kw["Key"].endswith("/refs/llama/v1.json"):
                race()
            return orig(**kw)

        monkeypatch.setattr(client, "put_object", put_object)
    left = remove(ref, platform=cuda_bundle.platform, store=remover)
    fired[-1].join()
    assert fired, "the removal never wrote the ref"
    with open_store(file_or_s3.store) as st:
        final = sorted(e.platform for e in st.get_ref("llama", "v1").entries)
    assert final == sorted([bundle.platform, y.platform])
    assert cuda_bundle.platform not in [e.platform for e in left.entries]


def test_s3_rm_of_the_last_platform_leaves_a_tag_that_reads_as_missing(
    rgw, s3_env, shared_bucket, bundle, keys, tmp_path, cli
):
    from cachetool.refs.admin import remove

    store = f"s3://{shared_bucket}/tomb-{uuid.uuid4().hex[:8]}"
    push(bundle, f"{store}/llama:v1")
    assert remove(f"{store}/llama:v1", platform=bundle.platform) is None
    r = cli("pull", f"{store}/llama:v1", "--cache-root", tmp_path / "r", "--trust", keys["pub"])
    assert r.rc == 5 and "not found" in r.error_line(), r
    assert cli("ls", store, "--json").rc == 0 and json.loads(cli("ls", store, "--json").out)["refs"] == []
    assert cli("rm", f"{store}/llama:v1").rc == 5
    push(bundle, f"{store}/llama:v1")  # a push after the removal writes over the empty index
    assert [e.platform for e in open_store(store).get_ref("llama", "v1").entries] == [bundle.platform]


# ------------------------------------------------------------------------------------------- resume replies
def test_s3_reply_200_to_a_range_request_restarts_the_blob(rgw, s3_env, shared_bucket, bundle, tmp_path, monkeypatch):
    """Before: a server that ignores ``Range`` (200, whole body) had the whole body appended to the partial file,
    and the pull ended as OversizeBlobError (exit 3) instead of a restart."""
    store = f"s3://{shared_bucket}/range200-{uuid.uuid4().hex[:8]}"
    push(bundle, f"{store}/llama:v1")
    blob = max(bundle.blobs, key=lambda b: b.stored_size)
    data = bundle.blob_path(blob).read_bytes()
    with open_store(store) as st:
        orig = st.client.get_object
        asked = []

        def ignoring_range(**kw):  # the real server, asked without the Range: a 200 with the whole body
            asked.append(kw.pop("Range", None))
            return orig(**kw)

        monkeypatch.setattr(st.client, "get_object", ignoring_range)
        dest = tmp_path / "partial"
        dest.write_bytes(data[: len(data) // 2])
        st.get_blob(blob, dest)
    assert asked[0] == f"bytes={len(data) // 2}-"
    assert dest.read_bytes() == data and st.counters.blobs_resumed == 0


# ------------------------------------------------------------------------------------------- partial files
def _big_bundle(tmp_path, keys, store):
    """A bundle of about 3 MiB stored (random bytes do not compress), pushed to ``store``."""
    from cachetool.bundle.packing import pack
    from tests.cache_trees import make_native_tree

    src = make_native_tree(tmp_path / "src", layers=2)
    rank = next(src.glob("torch_compile_cache/*/rank_0_0/backbone"))
    for i in range(3):
        (rank / f"random_{i}").write_bytes(os.urandom(1 << 20))
    with pack(src, sign_key=keys["key"]) as b:
        push(b, f"{store}/llama:v1")
        return list(b.blobs)


def test_blob_missing_from_the_store_leaves_no_partial_files(bundle, keys, tmp_path, cli):
    """Before: a blob that can never be fetched (exit 5) left the blobs fetched so far in the partial folder."""
    store = f"file://{tmp_path}/store"
    push(bundle, f"{store}/llama:v1")
    victim = max(bundle.blobs, key=lambda b: b.digest)  # fetched last: the others arrive first
    (tmp_path / "store" / "blobs" / "sha256" / hexof(victim.stored_digest)).unlink()
    root = tmp_path / "root"
    r = cli("pull", f"{store}/llama:v1", "--cache-root", root, "--trust", keys["pub"], "--workers", "1")
    assert r.rc == 5 and "missing from store" in r.error_line(), r
    assert not root.exists()


def test_pull_into_a_full_disk(keys, tmp_path, cli, small_disk):
    """Before: exit 1 ("unexpected failure") with 2 MB left in the partial folder. Now exit 9, one line, and
    nothing of the pull is left on the full file system."""
    store = f"file://{tmp_path}/store"
    _big_bundle(tmp_path, keys, store)
    r = cli("pull", f"{store}/llama:v1", "--cache-root", small_disk / "root", "--trust", keys["pub"])
    assert r.rc == 9, r
    line = r.error_line()
    assert "is full" in line and str(small_disk / "root") in line, line
    assert list(small_disk.iterdir()) == []


@pytest.mark.parametrize("blobs_in", ["memory", "files"])
def test_disk_full_while_expanding_removes_the_partial_files(bundle, keys, tmp_path, cli, monkeypatch, blobs_in):
    """The same refusal where no file system can be mounted: ENOSPC injected where the installer writes a file,
    a small blob's (expanded in memory) or a large one's (expanded from its downloaded file)."""
    import errno

    from cachetool.install import blobs, stage

    store = f"file://{tmp_path}/store"
    push(bundle, f"{store}/llama:v1")
    calls = []

    def full(*args):
        calls.append(args)
        raise OSError(errno.ENOSPC, "No space left on device", "somewhere")

    if blobs_in == "files":
        monkeypatch.setattr(blobs, "IN_MEMORY_MAX", 0)
        monkeypatch.setattr(blobs, "verify_and_expand", full)
    else:
        monkeypatch.setattr(stage, "write_new", full)
    root = tmp_path / "root"
    r = cli("pull", f"{store}/llama:v1", "--cache-root", root, "--trust", keys["pub"])
    assert r.rc == 9 and "is full" in r.error_line() and calls, r
    assert not root.exists()


@pytest.mark.usefixtures("blobs_on_disk")
def test_partial_files_kept_for_a_retry_are_bounded(bundle, keys, tmp_path, monkeypatch):
    store = f"file://{tmp_path}/store"
    push(bundle, f"{store}/llama:v1")
    root = tmp_path / "root"
    (root / PARTIAL_DIR).mkdir(parents=True)
    stale = root / PARTIAL_DIR / ("e" * 64)  # left by a failed pull of another bundle, long ago
    stale.write_bytes(b"s" * 200_000)
    os.utime(stale, (1, 1))
    monkeypatch.setenv("CACHETOOL_PARTIAL_MAX_BYTES", "100000")
    st = open_store(store)
    orig, calls = st.get_blob, []

    def flaky(blob, dest):
        calls.append(blob)
        if len(calls) == 4:
            raise StoreError("store went away")
        return orig(blob, dest)

    st.get_blob = flaky
    with pytest.raises(StoreError):
        pull(f"{store}/llama:v1", root, trust=[keys["pub"]], store=st, workers=1)
    kept = list((root / PARTIAL_DIR).iterdir())
    assert not stale.exists() and 1 <= len(kept) <= 3
    assert sum(p.stat().st_size for p in kept) <= 100_000
