"""The object backends under the file and S3 stores: the few operations, the same on both (real folder, real RGW)."""

from __future__ import annotations

import io
import uuid

import pytest

from cachetool.errors import NotFoundError, VerificationError
from cachetool.stores.file import FileBackend
from cachetool.stores.object_store import ObjectStore
from cachetool.stores.s3 import S3Backend, S3Store


@pytest.fixture(params=["file", "s3"])
def backend(request, tmp_path):
    if request.param == "file":
        (tmp_path / "store").mkdir()
        return FileBackend(tmp_path / "store")
    request.getfixturevalue("s3_env")
    return S3Backend(request.getfixturevalue("shared_bucket"), f"backend-{uuid.uuid4().hex[:8]}")


def test_get_put_stat_list_delete(backend):
    assert backend.stat("a/b") is None and backend.get("a/b", 10, "read") is None
    backend.put("a/b", "write", data=b"hello")
    backend.put("a/c.json", "write", data=b"{}")
    backend.put("z", "write", data=b"x")
    assert backend.stat("a/b").size == 5 and backend.get("a/b", 10, "read").data == b"hello"
    assert [i.key for i in backend.list("a/")] == ["a/b", "a/c.json"]
    with pytest.raises(VerificationError, match="larger than"):
        backend.get("a/b", 4, "read")
    backend.delete(["a/b", "a/missing"], "delete")
    assert [i.key for i in backend.list("a/")] == ["a/c.json"]
    backend.close()


def test_put_if_is_a_compare_and_swap(backend):
    assert backend.put_if("refs/n/t.json", b"1", None, "write")  # None: only if it does not exist
    assert not backend.put_if("refs/n/t.json", b"2", None, "write")
    v1 = backend.get("refs/n/t.json", 10, "read").version
    assert backend.put_if("refs/n/t.json", b"3", v1, "write")
    assert not backend.put_if("refs/n/t.json", b"4", v1, "write")  # another writer got in after our read
    assert backend.get("refs/n/t.json", 10, "read").data == b"3"
    v3 = backend.get("refs/n/t.json", 10, "read").version
    if backend.conditional_delete:
        assert backend.put_if("refs/n/t.json", None, v3, "delete")
        assert backend.stat("refs/n/t.json") is None
    assert [i.key for i in backend.list("refs/")] == ([] if backend.conditional_delete else ["refs/n/t.json"])


def test_download_resumes_and_names_a_missing_object(backend, tmp_path):
    backend.put("blobs/x", "write", data=b"0123456789")
    dest = tmp_path / "part"
    dest.write_bytes(b"0123")
    backend.download("blobs/x", 10, dest, "download", "gone")
    assert dest.read_bytes() == b"0123456789" and backend.counters.blobs_resumed == 1
    with pytest.raises(NotFoundError, match="^gone$"):
        backend.download("blobs/y", 10, tmp_path / "other", "download", "gone")


def test_a_missing_store_is_not_found(tmp_path, rgw, s3_env):
    with pytest.raises(NotFoundError, match="does not exist"):
        FileBackend(tmp_path / "nowhere").check()
    with pytest.raises(NotFoundError, match="bucket 'no-such-bucket-x' does not exist"):
        S3Backend("no-such-bucket-x").check()


def test_s3_objects_larger_than_their_bound_are_not_read_into_memory():
    # A declared size over the bound is refused before the body is read; without one, at most bound + 1 bytes are.
    # (Moved here from test_hostile_store.py with the object backend: a fake client, so no server is needed.)
    class Body(io.BytesIO):
        asked: list = []

        def read(self, n=-1):
            Body.asked.append(n)
            return super().read(n if n is not None and n >= 0 else 64 << 20)

    class Client:
        def __init__(self, length):
            self.length = length

        def get_object(self, **kw):
            return {"Body": Body(b"[" * (17 << 20)), "ContentLength": self.length, "ETag": '"x"'}

    st = S3Store("b", "p")
    for length in (100 << 30, 0):  # a declared size, and a server that declares none
        st.backend._client = Client(length)
        with pytest.raises(VerificationError, match="larger than 16 MiB"):
            st.get_ref("llama", "v1")
    assert all(n is not None and 0 <= n <= (16 << 20) + 1 for n in Body.asked)
    assert isinstance(st, ObjectStore)
    assert ObjectStore(st.backend).capabilities == S3Store.capabilities  # a store built on any backend declares them
