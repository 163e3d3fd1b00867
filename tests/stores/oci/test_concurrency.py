"""Pushes at once on docker-registry: two pushes through one OCIStore object (a server pushing from threads), and
two pushers racing on one blob (a CI matrix whose jobs share the signature's empty config blob): one's commit, and
the other's manifest PUT meeting the blob's link while the registry rewrites it."""

from __future__ import annotations

import json
import threading
import uuid

import pytest

from cachetool.api import pull
from cachetool.bundle.packing import pack
from cachetool.errors import StoreError
from cachetool.stores import open_store
from cachetool.stores.oci import media, packs
from tests.cache_trees import packable_tree, tree_snapshot


@pytest.fixture(scope="module")
def bundles(tmp_path_factory, keys):
    """Signed bundles with overlapping blob sets: two big enough to be packed (with different pack plans), and a
    small one whose plan sends each blob alone, blobs the packed ones pack."""
    out = {}
    for name, n in (("packed", packs.PACK_FROM + 40), ("packed-more", packs.PACK_FROM + 90), ("small", 0)):
        tree, _ = packable_tree(tmp_path_factory.mktemp(name) / "tree", n)
        out[name] = (tree, pack(tree, sign_key=keys["key"]))
    yield out
    for _, b in out.values():
        b.close()


@pytest.fixture(scope="module")
def packed_pair(bundles):
    return bundles["packed"], bundles["packed-more"]


def _repo(oci_registry) -> str:
    return f"{oci_registry.url}/team/race-{uuid.uuid4().hex[:6]}"


@pytest.mark.parametrize("pair", [("packed", "packed-more"), ("small", "packed"), ("packed", "packed")])
def test_two_interleaved_pushes_through_one_store_each_list_their_own_packs(
    oci_registry, bundles, pair, keys, tmp_path
):
    """Plan A, plan B, then A's blobs and manifest: A's manifest lists A's packs and singles, and each was uploaded
    (the plan was one slot on the store: A's manifest fell back to one layer per blob, never uploaded; and a blob
    that B packs and A sends alone went up only in B's pack). Two pushes of one bundle each commit their own plan."""
    (tree_a, a), (tree_b, b) = bundles[pair[0]], bundles[pair[1]]
    repo = _repo(oci_registry)
    st = open_store(repo)
    try:
        sessions = [st.push(bundle.blobs, bundle.blob_path) for bundle in (a, b)]
        planned = [(bundle, p, p.missing()) for bundle, p in zip((a, b), sessions)]  # both plans first
        for _, p, missing in planned:
            for blob in missing:
                p.put_blob(blob)
        pins = [p.commit(bundle.manifest_bytes(), bundle.signature_bytes()).pin for bundle, p, _ in planned]
    finally:
        st.close()
    for pin, tree in zip(pins, (tree_a, tree_b)):
        root = tmp_path / pin[7:19]
        pull(f"{repo}@{pin}", root, trust=[keys["pub"]])
        assert tree_snapshot(root) == tree_snapshot(tree)


def test_pack_files_of_simultaneous_plans_do_not_share_a_name(oci_registry, packed_pair, monkeypatch):
    """Both plans open their first pack before either writes it: each must get a file of its own (one shared
    ``pack-0.tar`` was truncated by the other and renamed away under it)."""
    (_, a), (_, b) = packed_pair
    st = open_store(_repo(oci_registry))
    both_open = threading.Barrier(2, timeout=30)
    first = threading.local()
    real_write = packs.write_pack

    def write_after_both_opened(members, blob_path, out):
        if not getattr(first, "done", False):
            first.done = True
            both_open.wait()
        return real_write(members, blob_path, out)

    monkeypatch.setattr(packs, "write_pack", write_after_both_opened)
    errors = []

    sessions = {}

    def plan(bundle):
        try:
            sessions[bundle.manifest_digest] = st.push(bundle.blobs, bundle.blob_path)
            sessions[bundle.manifest_digest].missing()
        except Exception as exc:  # reported below
            errors.append(exc)

    try:
        ts = [threading.Thread(target=plan, args=(x,)) for x in (a, b)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        assert not errors, errors
        for bundle in (a, b):  # every pack file holds what its digest says
            plan = sessions[bundle.manifest_digest].plan
            files = {digest: path for digest, _, path in plan.pack_of.values()}
            assert {layer["digest"] for layer in plan.layers} == set(files)
            for digest, path in files.items():
                assert media.sha(path.read_bytes()) == digest
    finally:
        st.close()


def test_an_upload_lost_to_another_pusher_counts_as_done(oci_registry, monkeypatch):
    """An upload whose PUT fails while the blob is there now (another pusher's commit landed) is done, not an
    error: content-addressed, theirs is ours."""
    repo = _repo(oci_registry)
    ours, theirs = open_store(repo), open_store(repo)
    data = b'{"cachetool": "race"}'
    digest = media.sha(data)

    def lose_the_race(d, size, what, **kw):
        theirs.repository.upload(d, size, what, **kw)  # the other pusher's commit lands first
        raise StoreError(
            f"{what}: registry {ours.host} answered 400 DIGEST_INVALID: provided digest did not match uploaded content",
            store=ours.url,
            key=d,
            status=400,
        )

    monkeypatch.setattr(ours.repository, "upload", lose_the_race)
    try:
        ours.repository.upload_retrying(digest, len(data), "upload test blob", data=data)
        assert ours.repository.head_blob(digest) == len(data)
    finally:
        ours.close()
        theirs.close()


def test_an_upload_that_fails_and_left_nothing_still_fails(oci_registry, monkeypatch):
    """The HEAD after a failure only forgives a blob that is really there."""
    st = open_store(_repo(oci_registry))
    data = b'{"cachetool": "nothing"}'

    def fail(d, size, what, **kw):
        raise StoreError(f"{what}: registry answered 400 DIGEST_INVALID", store=st.url, key=d, status=400)

    monkeypatch.setattr(st.repository, "upload", fail)
    try:
        with pytest.raises(StoreError, match="DIGEST_INVALID"):
            st.repository.upload_retrying(media.sha(data), len(data), "upload test blob", data=data)
    finally:
        st.close()


def test_a_push_through_a_shared_store_leaves_no_pack_files(oci_registry, bundles):
    """A push's pack files live in its session's folder, removed at commit or abort (they stayed until the store's
    close: a server pushing many bundles through one store kept every pack it ever wrote on disk)."""
    from cachetool.transfer.push import push

    repo = _repo(oci_registry)
    with open_store(repo) as st:
        for name in ("packed", "small"):
            push(bundles[name][1], f"{repo}:{name}", store=st)
        with st.push(bundles["packed-more"][1].blobs, bundles["packed-more"][1].blob_path) as p:
            p.missing()
            assert p.plan.pack_of and all(path.exists() for _, _, path in p.plan.pack_of.values())
        assert p.state == "aborted"
        assert list(st.blobs.scratch().iterdir()) == []


def test_an_abandoned_push_sends_nothing_for_a_later_one(oci_registry, bundles):
    """A push that planned and gave up (its session left without commit) has no say in later pushes: before, its
    plan stayed open on the store until close, and every later put_blob of a blob it packed uploaded its packs."""
    (_, packed), (_, more) = bundles["packed"], bundles["packed-more"]
    repo = _repo(oci_registry)
    with open_store(repo) as st:
        with st.push(more.blobs, more.blob_path) as abandoned:
            abandoned.missing()
        with st.push(packed.blobs, packed.blob_path) as p:
            missing = p.missing()
            before = st.counters.bytes_up
            for blob in missing:
                p.put_blob(blob)
            sent = st.counters.bytes_up - before
            singles = {b.digest for b in p.plan.singles}
            expected = sum(layer["size"] for layer in p.plan.layers) + sum(
                b.stored_size for b in missing if b.digest in singles
            )
            assert sent == expected
            p.commit(packed.manifest_bytes(), packed.signature_bytes())


def test_a_failed_check_after_a_failed_upload_leaves_the_retries_to_run(oci_registry, monkeypatch):
    """The HEAD after a failed PUT is a question, not a request of its own to fail on: when it fails too (the
    registry briefly down), the upload is tried again with a new session (it ended the loop with the HEAD's
    error)."""
    monkeypatch.setenv("CACHETOOL_STORE_MAX_ATTEMPTS", "3")
    st = open_store(_repo(oci_registry))
    data = b'{"cachetool": "flaky"}'
    digest = media.sha(data)
    real_upload, real_head = st.repository.upload, st.repository.head_blob
    failures = {"put": 1, "head": 1}

    def flaky_upload(d, size, what, **kw):
        if failures["put"]:
            failures["put"] -= 1
            raise StoreError(f"{what}: registry answered 503", store=st.url, key=d, status=503)
        return real_upload(d, size, what, **kw)

    def flaky_head(d, **kw):
        if failures["head"]:
            failures["head"] -= 1
            raise StoreError(f"check blob {d[:19]}: registry answered 503", store=st.url, key=d, status=503)
        return real_head(d, **kw)

    monkeypatch.setattr(st.repository, "upload", flaky_upload)
    monkeypatch.setattr(st.repository, "head_blob", flaky_head)
    try:
        st.repository.upload_retrying(digest, len(data), "upload test blob", data=data)
        assert failures == {"put": 0, "head": 0} and real_head(digest) == len(data)
    finally:
        st.close()


def test_two_pushes_through_one_store_send_the_signatures_empty_config_once(oci_registry, bundles, monkeypatch):
    """Both pushes ask for the signature's empty config before either sends it: it still goes up once. (Sent
    twice, docker-registry rewrites its link file under the other push's signature PUT, which then fails with 400
    DIGEST_INVALID: CI's two-platform push test failed on it.)"""
    from cachetool.transfer.push import push

    repo = _repo(oci_registry)
    st = open_store(repo)
    both_asked = threading.Barrier(2, timeout=60)
    real_head, real_upload = st.repository.head_blob, st.repository.upload
    sent: list[str] = []

    def head_then_wait(digest, **kw):
        got = real_head(digest, **kw)
        if digest == media.EMPTY_DIGEST:
            both_asked.wait()
        return got

    def counted_upload(digest, size, what, **kw):
        sent.append(digest)
        return real_upload(digest, size, what, **kw)

    monkeypatch.setattr(st.repository, "head_blob", head_then_wait)
    monkeypatch.setattr(st.repository, "upload", counted_upload)
    errors: list[Exception] = []

    def push_one(name):
        try:
            push(bundles[name][1], f"{repo}:{name}", store=st)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=push_one, args=(name,)) for name in ("packed", "small")]
    try:
        [t.start() for t in threads]
        [t.join() for t in threads]
    finally:
        st.close()
    assert not errors, errors
    assert sent.count(media.EMPTY_DIGEST) == 1


def _link_file(registry, store, digest: str):
    """Where docker-registry's filesystem driver keeps the repository's link to blob ``digest``."""
    return (
        registry.data_dir
        / "docker/registry/v2/repositories"
        / store.repo
        / "_layers/sha256"
        / digest.split(":", 1)[1]
        / "link"
    )


def _signature_like_manifest() -> bytes:
    return json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": media.OCI_MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.empty.v1+json",
                "digest": media.EMPTY_DIGEST,
                "size": len(media.EMPTY_JSON),
            },
            "layers": [],
            "annotations": {"test": uuid.uuid4().hex},
        }
    ).encode()


def test_a_manifest_put_that_meets_a_link_being_rewritten_is_asked_again(oci_registry, monkeypatch):
    """The real registry in the state another pusher's upload leaves for an instant: the link file of a blob the
    manifest names is empty (truncated, not yet written). docker-registry answers the PUT 400 DIGEST_INVALID; the
    store asks again once the link is back, instead of failing the push."""
    from cachetool.stores.oci import client

    st = open_store(_repo(oci_registry))
    try:
        st.repository.upload(media.EMPTY_DIGEST, len(media.EMPTY_JSON), "upload empty config", data=media.EMPTY_JSON)
        link = _link_file(oci_registry, st, media.EMPTY_DIGEST)
        written = link.read_bytes()
        link.write_bytes(b"")  # the other pusher's commit, between truncate and write
        waits = []

        def other_pusher_finishes(what, attempt, reason, seconds=None):
            waits.append(reason)
            link.write_bytes(written)

        monkeypatch.setattr(client, "pause", other_pusher_finishes)
        body = _signature_like_manifest()
        st.repository.put_manifest(media.sha(body), body, media.OCI_MANIFEST, "put signature manifest")
        assert len(waits) == 1 and "DIGEST_INVALID" in waits[0]
        assert st.repository.get_manifest(media.sha(body), "read back", media.OCI_MANIFEST)[0] == body
    finally:
        st.close()


def test_a_manifest_put_under_a_digest_not_its_own_fails_at_once(oci_registry, monkeypatch):
    """Our own mistake is not the registry's moment: DIGEST_INVALID for a digest that is not the body's is the
    error, with no retries."""
    from cachetool.stores.oci import client

    waits = []
    monkeypatch.setattr(client, "pause", lambda *a, **kw: waits.append(a))
    st = open_store(_repo(oci_registry))
    try:
        st.repository.upload(media.EMPTY_DIGEST, len(media.EMPTY_JSON), "upload empty config", data=media.EMPTY_JSON)
        body = _signature_like_manifest()
        with pytest.raises(StoreError, match="400 DIGEST_INVALID"):
            st.repository.put_manifest(media.sha(b"other"), body, media.OCI_MANIFEST, "put signature manifest")
        assert waits == []
    finally:
        st.close()
