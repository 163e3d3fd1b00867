"""The signing keys of the tests that sign, verify and install bundles, and their isolation from the machine's trust
settings: fixtures that a folder's conftest.py imports (an autouse fixture then applies to that folder)."""

from __future__ import annotations

import pytest

from cachetool.bundle.signing import generate_keypair, load_private_key


@pytest.fixture(autouse=True)
def isolated_trust(monkeypatch, tmp_path):
    """No pinned keys leak in from the machine running the tests."""
    monkeypatch.delenv("CACHETOOL_TRUSTED_KEYS", raising=False)
    monkeypatch.setenv("CACHETOOL_CONFIG_DIR", str(tmp_path / "config"))


@pytest.fixture(scope="session")
def keys(tmp_path_factory):
    """A signer ("priv", "pub", "id", "key") and another key pair that nothing trusts ("other_...")."""
    d = tmp_path_factory.mktemp("keys")
    priv, pub, kid = generate_keypair(d / "signer")
    opriv, opub, okid = generate_keypair(d / "other")
    return {
        "priv": priv,
        "pub": pub,
        "id": kid,
        "key": load_private_key(priv),
        "other_priv": opriv,
        "other_pub": opub,
        "other_key": load_private_key(opriv),
    }
