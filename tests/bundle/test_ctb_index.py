"""The .ctb index read header by header (cachetool.bundle.ustar) is tarfile's, member for member, wherever it
answers; every other archive is left to tarfile (the refusals in test_refusals.py go that way)."""

from __future__ import annotations

import io
import os
import tarfile

import pytest

from cachetool.bundle.ctb import open_ctb, write_ctb
from cachetool.bundle.packing import pack
from cachetool.bundle.ustar import plain_members
from tests.cache_trees import make_native_tree


def _tarfile_index(path) -> list[tuple[str, int, int]]:
    with tarfile.open(path, "r:") as tf:
        return [(m.name, m.offset_data, m.size) for m in tf.getmembers()]


def _plain(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        return plain_members(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def test_a_written_ctb_is_read_without_tarfile_and_as_tarfile_reads_it(tmp_path, keys):
    make_native_tree(tmp_path / "tree")
    with pack(tmp_path / "tree", sign_key=keys["priv"]) as b:
        ctb = write_ctb(b, tmp_path / "b.ctb")
        digests = {x.digest for x in b.blobs}
    got = _plain(ctb)
    assert got is not None and len(got) == len(digests) + 2
    assert got == _tarfile_index(ctb)
    with open_ctb(ctb) as opened:
        assert {x.digest for x in opened.blobs} == digests


def _tar(path, members, fmt=tarfile.USTAR_FORMAT):
    with tarfile.open(path, "w:", format=fmt) as tf:
        for name, data, kind in members:
            ti = tarfile.TarInfo(name)
            ti.size, ti.type = (len(data), kind)
            tf.addfile(ti, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return path


@pytest.mark.parametrize(
    "case",
    [
        "symlink",
        "folder",
        "pax",
        "gnu-long-name",
        "prefix",
        "bad-checksum-later",
        "bad-number-later",
        "cut-in-data",
        "base-256-size",
        "negative-size",
    ],
)
def test_anything_but_plain_members_is_left_to_tarfile(tmp_path, case):
    reg = tarfile.REGTYPE
    members = [("manifest.json", b"{}", reg), ("blobs/a", b"x" * 700, reg)]
    fmt = tarfile.USTAR_FORMAT
    if case in ("symlink", "folder"):
        members.append(("blobs/b", b"", tarfile.SYMTYPE if case == "symlink" else tarfile.DIRTYPE))
    elif case in ("pax", "gnu-long-name"):
        members.append(("blobs/" + "n" * 120, b"y", reg))
        fmt = tarfile.PAX_FORMAT if case == "pax" else tarfile.GNU_FORMAT
    elif case == "prefix":
        members.append(("d" * 80 + "/" + "n" * 60, b"y", reg))
    path = _tar(tmp_path / "a.tar", members, fmt)
    data = bytearray(path.read_bytes())
    second = 512 + 512  # the second member's header: after the first's header and its one block of data
    if case == "bad-checksum-later":
        data[second + 150] ^= 1
    elif case == "bad-number-later":  # a mode that is not octal, its checksum made right
        data[second + 100 : second + 108] = b"0000009\0"
        unsigned = 256 + sum(data[second : second + 148]) + sum(data[second + 156 : second + 512])
        data[second + 148 : second + 156] = b"%06o\0 " % unsigned
    elif case == "cut-in-data":
        del data[second + 1024 :]
    elif case == "base-256-size":
        data[second + 124 : second + 136] = b"\x80" + bytes(10) + b"\x01"
    elif case == "negative-size":  # -512 bytes: the next header would be this one again, forever
        data[second + 124 : second + 136] = b"-0000001000\0"
        unsigned = 256 + sum(data[second : second + 148]) + sum(data[second + 156 : second + 512])
        data[second + 148 : second + 156] = b"%06o\0 " % unsigned
    path.write_bytes(bytes(data))
    assert _plain(path) is None


def test_a_member_of_negative_size_is_refused_not_read_forever(tmp_path):
    """tarfile takes a signed size and steps back onto the same header: open_ctb of such a file read forever."""
    from cachetool.errors import BundleFormatError

    reg = tarfile.REGTYPE
    members = [("manifest.json", b"{}", reg), ("blobs/a", b"x" * 700, reg), ("blobs/" + "n" * 120, b"y", reg)]
    path = _tar(tmp_path / "a.ctb", members, tarfile.PAX_FORMAT)
    data = bytearray(path.read_bytes())
    second = 512 + 512
    data[second + 124 : second + 136] = b"-0000001000\0"
    unsigned = 256 + sum(data[second : second + 148]) + sum(data[second + 156 : second + 512])
    data[second + 148 : second + 156] = b"%06o\0 " % unsigned
    path.write_bytes(bytes(data))
    with pytest.raises(BundleFormatError, match="negative size"):
        open_ctb(path)
