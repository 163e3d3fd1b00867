"""A hostile file store: objects planted as symlinks or special files, oversized blobs, a ref that is not JSON.
The store must never read outside its folder nor more than the manifest declares; each case is one error line
with nothing in the cache root. Plus ref strings found by review."""

from __future__ import annotations

import os
import shutil

import pytest

from cachetool.digests import hexof
from cachetool.errors import UsageError, VerificationError
from cachetool.stores import open_store
from cachetool.stores.addresses import parse_ref
from cachetool.transfer.push import push


def _one_line(r):
    lines = [ln for ln in r.err.strip().splitlines() if not ln.startswith("pull: outcome=")]
    assert len(lines) == 1 and lines[0].startswith("error: "), r
    return lines[0]


def _nothing_in(root):
    return not root.exists() or not any(root.rglob("*"))


@pytest.fixture
def store(bundle, tmp_path):
    root = tmp_path / "store"
    push(bundle, f"file://{root}/llama:v1")
    return root


def _pull(cli, keys, store, root):
    return cli("pull", f"file://{store}/llama:v1", "--cache-root", root, "--trust", keys["pub"])


def _blob_path(store, bundle):
    b = max(bundle.blobs, key=lambda b: b.stored_size)
    return store / "blobs" / "sha256" / hexof(b.stored_digest), b


@pytest.mark.parametrize("what", ["blob", "manifest", "ref"])
def test_object_symlinked_outside_the_store_is_not_read(bundle, keys, cli, store, tmp_path, what):
    # Before: the store followed the link and read whatever it named (here a correct copy, so the pull succeeded).
    if what == "blob":
        p, _ = _blob_path(store, bundle)
    elif what == "manifest":
        p = store / "manifests" / "sha256" / f"{hexof(bundle.manifest_digest)}.json"
    else:
        p = store / "refs" / "llama" / "v1.json"
    outside = tmp_path / "outside"
    shutil.move(p, outside)
    os.symlink(outside, p)
    root = tmp_path / "root"
    r = _pull(cli, keys, store, root)
    assert r.rc in (3, 6), r
    assert "outside the store" in _one_line(r)
    assert _nothing_in(root)


def test_symlink_inside_the_store_is_fine(bundle, keys, cli, store, tmp_path):
    p, _ = _blob_path(store, bundle)
    shutil.move(p, store / "moved")
    os.symlink("../../moved", p)
    r = _pull(cli, keys, store, tmp_path / "root")
    assert r.rc == 0, r


def test_blob_larger_than_declared_is_cut_at_the_declared_size(bundle, store, tmp_path):
    # Before: get_blob copied the whole object (a link to /dev/zero filled the disk under .cachetool-partial).
    p, blob = _blob_path(store, bundle)
    with open(p, "ab") as f:
        f.write(b"\0" * (1 << 20))
    dest = tmp_path / "dest"
    with pytest.raises(VerificationError, match="more bytes than the manifest declares"):
        open_store(f"file://{store}").get_blob(blob, dest)
    assert dest.stat().st_size <= blob.stored_size


def test_blob_larger_than_declared_is_refused_when_read_whole(bundle, store, tmp_path):
    # read_blob (a small blob read in place) reads one byte past the declared size, never the whole object
    p, blob = _blob_path(store, bundle)
    os.truncate(p, 1 << 30)  # a sparse gigabyte
    with pytest.raises(VerificationError, match="more bytes than the manifest declares"):
        open_store(f"file://{store}").read_blob(blob, tmp_path)


def test_blob_that_is_a_fifo_is_refused_without_blocking(bundle, keys, cli, store, tmp_path):
    p, _ = _blob_path(store, bundle)
    p.unlink()
    os.mkfifo(p)
    root = tmp_path / "root"
    r = _pull(cli, keys, store, root)
    assert r.rc == 3, r
    assert "not a regular file" in _one_line(r)
    assert _nothing_in(root)


@pytest.mark.parametrize(
    "body",
    [b"[" * 100_000, b"\xff\xfe", b"[1, 2]", b'{"format": "cachetool.ref.v1", "entries": 5}'],
    ids=["deeply-nested", "not-utf8", "a-list", "entries-not-a-list"],
)
def test_ref_that_is_not_a_ref_is_one_line(keys, cli, store, tmp_path, body):
    (store / "refs" / "llama" / "v1.json").write_bytes(body)
    root = tmp_path / "root"
    for r in (_pull(cli, keys, store, root), cli("ls", f"file://{store}"), cli("gc", f"file://{store}", "--dry-run")):
        assert r.rc == 6, r
        assert "not a cachetool ref" in _one_line(r)
    assert _nothing_in(root)


@pytest.mark.parametrize("text", ["oci://host:99999/llama:v1", "oci://host:0/llama:v1"])
def test_oci_port_out_of_range(text):
    with pytest.raises(UsageError, match="port"):
        parse_ref(text)


def test_push_of_a_tampered_bundle_writes_nothing(bundle, keys, cli, tmp_path):
    # Before: the bad bytes were stored under the blob's digest; the next push of the good bundle skipped that blob
    # (the store "had" it), so every pull failed from then on.
    import tarfile

    from cachetool.bundle.ctb import write_ctb

    good = write_ctb(bundle, tmp_path / "good.ctb")
    data = bytearray(good.read_bytes())
    with tarfile.open(good) as tf:
        m = max((m for m in tf.getmembers() if m.name.startswith("blobs/")), key=lambda m: m.size)
    data[m.offset_data + m.size // 2] ^= 0xFF
    (tmp_path / "bad.ctb").write_bytes(data)
    store = tmp_path / "store"
    r = cli("push", tmp_path / "bad.ctb", f"file://{store}/llama:v1")
    assert r.rc == 3, r
    assert "does not match the manifest" in _one_line(r)
    assert not store.exists()
    assert cli("push", good, f"file://{store}/llama:v1").rc == 0
    assert _pull(cli, keys, store, tmp_path / "root").rc == 0


def test_push_with_a_signature_over_another_manifest_writes_nothing(bundle, tmp_path):
    import base64
    import json

    env = json.dumps({"payload": base64.b64encode(b"{}").decode(), "payloadType": "x", "signatures": []}).encode()
    store = tmp_path / "store"
    with pytest.raises(VerificationError, match="different manifest"):
        push(bundle.with_signature(env), f"file://{store}/llama:v1")
    assert not store.exists()


@pytest.mark.usefixtures("blobs_on_disk")
def test_partial_folder_planted_as_a_symlink_is_not_written_through(bundle, keys, cli, store, tmp_path):
    # Before: blobs were downloaded into the link's target, outside the cache root.
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / ".cachetool-partial").symlink_to(outside)
    r = _pull(cli, keys, store, root)
    assert r.rc == 3, r
    assert "symlink" in _one_line(r)
    assert not any(outside.iterdir())
    assert [p.name for p in root.iterdir()] == [".cachetool-partial"]


@pytest.mark.parametrize("blobs_in", ["memory", "files"])
def test_partial_folder_planted_as_a_symlink_is_never_trimmed_through(
    bundle, keys, cli, store, tmp_path, monkeypatch, blobs_in
):
    """Small blobs are read from the file store in place (no partial file): the pull succeeds; blobs fetched into
    files refuse the planted folder (exit 3). Either way, bounding the partial folder (here to 0 bytes) deletes
    nothing the link points to. Before: the bound was applied through the link, deleting the files it names."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "precious").write_bytes(b"keep me")
    (root / ".cachetool-partial").symlink_to(outside)
    monkeypatch.setenv("CACHETOOL_PARTIAL_MAX_BYTES", "0")
    if blobs_in == "files":
        from cachetool.install import blobs

        monkeypatch.setattr(blobs, "IN_MEMORY_MAX", 0)
    r = _pull(cli, keys, store, root)
    assert r.rc == (0 if blobs_in == "memory" else 3), r
    assert [p.name for p in outside.iterdir()] == ["precious"]
    assert (outside / "precious").read_bytes() == b"keep me"


@pytest.mark.usefixtures("blobs_on_disk")
@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_partial_file_planted_as_a_link_is_not_appended_to(bundle, keys, cli, store, tmp_path, link):
    # Before: the "resumed" download appended blob bytes to the file the link named, outside the cache root.
    root, victim = tmp_path / "root", tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    (root / ".cachetool-partial").mkdir(parents=True)
    for b in bundle.blobs:
        p = root / ".cachetool-partial" / hexof(b.stored_digest)
        p.symlink_to(victim) if link == "symlink" else os.link(victim, p)
    r = _pull(cli, keys, store, root)
    assert r.rc == 0, r
    assert victim.read_bytes() == b"precious\n"
    assert not (root / ".cachetool-partial").exists()


@pytest.mark.parametrize(
    "field,value",
    [
        ("platform", "cuda-x\nerror: all fine"),
        ("created", "\x1b[31mred"),
        ("fingerprint", {"gpu": "H200\nerror: forged"}),
        ("size", -1),
    ],
)
def test_ref_entries_cannot_forge_output_lines(keys, cli, store, tmp_path, field, value):
    # Before: the platform went verbatim into the one-line miss message and into `ls` (a forged "error:" line).
    import json

    p = store / "refs" / "llama" / "v1.json"
    doc = json.loads(p.read_text())
    doc["entries"][0][field] = value
    p.write_text(json.dumps(doc))
    root = tmp_path / "root"
    for r in (_pull(cli, keys, store, root), cli("ls", f"file://{store}")):
        assert r.rc == 6, r
        assert "not a cachetool ref" in _one_line(r)
    assert _nothing_in(root)


@pytest.fixture
def oci_store(request, tmp_path):
    from tests.store_kinds import make_store

    return make_store("oci", request, tmp_path)


def test_signature_envelope_over_1_mib_round_trips_through_oci(bundle, keys, cli, oci_store, tmp_path):
    # The envelope carries the manifest (base64) and every signature: a bundle of a few thousand files, or one
    # signed by many keys, passes 1 MiB. OCI pull refused any envelope above 1 MiB ("larger than 1048576 bytes").
    import json

    env = json.loads(bundle.signature_bytes())
    others = [{"keyid": f"{i:064x}", "sig": "A" * 88} for i in range(8000)]
    env["signatures"] = sorted(env["signatures"] + others, key=lambda s: s["keyid"])
    big = json.dumps(env).encode()
    assert len(big) > 1 << 20
    push(bundle.with_signature(big), oci_store.ref())
    r = cli("pull", oci_store.ref(), "--cache-root", tmp_path / "root", "--trust", keys["pub"])
    assert r.rc == 0, r


def test_gc_does_not_delete_through_a_planted_folder_link(cli, store, tmp_path):
    # Before: gc listed the link's target and deleted every file in it that no ref reaches.
    outside = tmp_path / "important"
    outside.mkdir()
    (outside / "thesis.tex").write_text("years of work")
    os.utime(outside / "thesis.tex", (0, 0))
    shutil.rmtree(store / "signatures" / "sha256")
    (store / "signatures" / "sha256").symlink_to(outside)
    r = cli("gc", f"file://{store}", "--older-than", "0")
    assert r.rc == 3, r
    assert "outside the store" in _one_line(r)
    assert (outside / "thesis.tex").read_text() == "years of work"


def test_push_and_rm_do_not_write_through_a_planted_folder_link(bundle, cli, store, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "v1.json").write_text("keep")
    (store / "refs" / "evil").symlink_to(outside)
    with pytest.raises(VerificationError, match="outside the store"):
        push(bundle, f"file://{store}/evil:v2")
    r = cli("rm", f"file://{store}/evil:v1")
    assert r.rc == 3, r
    assert "outside the store" in _one_line(r)
    assert sorted(p.name for p in outside.iterdir()) == ["v1.json"] and (outside / "v1.json").read_text() == "keep"


def test_push_replaces_a_blob_planted_as_a_link(bundle, keys, cli, store, tmp_path):
    # Before: the blob check followed the link, saw the right size and skipped the upload; every pull then failed.
    p, _ = _blob_path(store, bundle)
    outside = tmp_path / "outside"
    shutil.move(p, outside)
    os.symlink(outside, p)
    push(bundle, f"file://{store}/llama:v1")
    assert not p.is_symlink() and p.read_bytes() == outside.read_bytes()
    assert _pull(cli, keys, store, tmp_path / "root").rc == 0


class _HostileRegistry:
    """An in-process 'registry': the tag's manifest is endless, every blob body is cut half-way."""

    def __enter__(self):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                if "/manifests/" in self.path:  # claims and sends far more than any manifest may be
                    self.send_response(200)
                    self.send_header("Content-Type", "application/vnd.oci.image.index.v1+json")
                    self.send_header("Content-Length", str(1 << 30))
                    self.end_headers()
                    try:
                        for _ in range(64):
                            self.wfile.write(b" " * (1 << 20))
                        self.connection.shutdown(2)
                    except OSError:
                        pass
                    self.close_connection = True
                    return
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                self.wfile.write(b"x" * 10)
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        return f"127.0.0.1:{self.srv.server_address[1]}"

    def __exit__(self, *exc):
        self.srv.shutdown()
        self.srv.server_close()


def test_hostile_registry_gives_one_line_errors(keys, cli, tmp_path):
    # Before: a manifest body was read whole into memory (r.content), and a manifest/signature body cut mid-way
    # escaped as a requests exception (a traceback).
    from cachetool.errors import StoreError
    from cachetool.stores.oci import OCIStore

    with _HostileRegistry() as host:
        r = cli("pull", f"oci://{host}/team/llama:v1", "--cache-root", tmp_path / "root", "--trust", keys["pub"])
        assert r.rc == 3, r
        assert "larger than" in _one_line(r)
        st = OCIStore(host, "team/llama", max_attempts=1)
        with pytest.raises(StoreError, match="cut"):
            st.get_manifest("sha256:" + "0" * 64)
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize(
    "status,content_range,kept",
    [
        (206, "bytes 4-9/10", True),  # the range asked for: appended
        (206, "bytes 0-9/10", False),  # a 206 for other bytes: start over, never appended
        (206, None, False),
        (200, None, False),  # the Range ignored: the body replaces the partial file
    ],
)
def test_resume_follows_the_status_and_content_range(tmp_path, status, content_range, kept):
    from cachetool.stores.base import TransferCounters
    from cachetool.stores.common import download_resumable

    data = b"0123456789"
    dest = tmp_path / "part"
    dest.write_bytes(data[:4])
    asked = []

    def open_from(offset):
        asked.append(offset)
        if offset and len(asked) == 1:
            start = int(content_range.split()[1].split("-")[0]) if content_range else 0
            return iter([data[start if status == 206 else 0 :]]), status, content_range
        return iter([data[offset:]]), 206 if offset else 200, f"bytes {offset}-9/10" if offset else None

    c = TransferCounters()
    download_resumable(dest, len(data), "blob x", open_from, (ConnectionError,), RuntimeError, c, 3)
    assert dest.read_bytes() == data
    assert c.blobs_resumed == (1 if kept else 0)
    assert asked == ([4] if kept or status == 200 else [4, 0])
