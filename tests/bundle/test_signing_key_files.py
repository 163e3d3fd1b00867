"""A key file that is no key is refused in one complete line naming the file and what it is (issue 45, item 3).

A garbage ``--trust`` file ended mid-sentence: "garbage.pub is not a PEM or ssh-ed25519 public key (Unable to load PEM
file. See …)", cryptography's message cut at 80 characters before its FAQ link."""

from __future__ import annotations

import os

import pytest

from cachetool.bundle.signing import load_private_key, load_public_key
from cachetool.errors import UsageError

NOT_KEYS = {
    "random bytes": os.urandom(300),
    "a truncated PEM": b"-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----\n",
    "an ssh key of another kind": b"ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC user@host\n",
    "a broken ssh-ed25519 line": b"ssh-ed25519 AAAAbroken\n",
    "text": b"hello, this is not a key at all, but a note that is long enough to be cut somewhere in the middle\n",
}


def _refusal(load, path) -> str:
    with pytest.raises(UsageError) as e:
        load(path)
    return e.value.message


@pytest.mark.parametrize("what", sorted(NOT_KEYS))
@pytest.mark.parametrize("load", [load_public_key, load_private_key], ids=["trusted", "signing"])
def test_a_file_that_is_no_key_is_one_complete_line_naming_it(tmp_path, what, load):
    path = tmp_path / "k.pub"
    path.write_bytes(NOT_KEYS[what])
    message = _refusal(load, path)
    assert str(path) in message and "\n" not in message, message
    # a whole sentence of ours: not a library's message cut short, nor its pointer to a FAQ
    assert "…" not in message and "See " not in message and message.count("(") == message.count(")"), message
