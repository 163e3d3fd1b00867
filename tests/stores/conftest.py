"""What the store tests share: signing keys, every store kind, and a small real file system."""

import subprocess

import pytest

from tests.signing_keys import keys  # noqa: F401 - fixtures of this folder
from tests.store_kinds import (  # noqa: F401
    any_store,
    bundle,
    cuda_bundle,
    isolated,
    local_platform,
    shared_bucket,
    stoppable_store,
    tree,
)


@pytest.fixture
def small_disk(tmp_path):
    """A real 1 MiB file system (tmpfs), unmounted after the test; skipped where mounting is not allowed."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if p.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()[:100]}")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=True)
