"""The store layouts are unchanged by the object-store rework (issue 22): the S3 keys are the documented ones, and a
store written by the code before it pulls with this code, and the other way round (a fleet mid-rollout)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from cachetool.api import pull
from cachetool.bundle.ctb import write_ctb
from cachetool.digests import hexof
from cachetool.refs.admin import gc, remove
from cachetool.transfer.push import push

ROOT = Path(__file__).resolve().parents[2]
BEFORE = "51b49f9"  # the last commit before stores became one ObjectStore on file and S3 backends


def test_s3_keys_are_the_documented_layout(rgw, s3_env, shared_bucket, bundle):
    import uuid

    prefix = f"layout-{uuid.uuid4().hex[:8]}"
    push(bundle, f"s3://{shared_bucket}/{prefix}/llama:v1")
    c = rgw.client()
    keys = {
        o["Key"][len(prefix) + 1 :]: o["Key"]
        for o in c.list_objects_v2(Bucket=shared_bucket, Prefix=prefix + "/")["Contents"]
    }
    m = hexof(bundle.manifest_digest)
    want = {f"blobs/sha256/{hexof(b.stored_digest)}": bundle.blob_path(b).read_bytes() for b in bundle.blobs}
    want[f"manifests/sha256/{m}.json"] = bundle.manifest_bytes()
    want[f"signatures/sha256/{m}.dsse.json"] = bundle.signature_bytes()
    assert sorted(keys) == sorted([*want, "refs/llama/v1.json"])
    for rel, data in want.items():
        assert c.get_object(Bucket=shared_bucket, Key=keys[rel])["Body"].read() == data, rel
    ref = json.loads(c.get_object(Bucket=shared_bucket, Key=keys["refs/llama/v1.json"])["Body"].read())
    assert ref["format"] == "cachetool.ref.v1" and [e["manifest_digest"] for e in ref["entries"]] == [
        bundle.manifest_digest
    ]


@pytest.fixture(scope="module")
def old_code(tmp_path_factory) -> Path:
    """The tree at BEFORE (cachetool and compiler), unpacked beside this one."""
    try:
        tar = subprocess.run(
            ["git", "-C", str(ROOT), "archive", BEFORE, "cachetool", "compiler"], check=True, capture_output=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"no git history with {BEFORE}: {exc}")
    out = tmp_path_factory.mktemp("before")
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(out)
    return out


def _run_old(old_code: Path, code: str) -> None:
    r = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(old_code)!r})\n{code}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_bundle_pushed_by_the_code_before_pulls_and_collects(any_store, bundle, keys, tree, tmp_path, old_code):
    from tests.cache_trees import tree_snapshot

    ctb = write_ctb(bundle, tmp_path / "b.ctb")
    ref = any_store.ref("old")
    _run_old(
        old_code,
        f"import cachetool, cachetool.transfer as t\nassert {str(old_code)!r} in cachetool.__file__\n"
        f"t.push({str(ctb)!r}, {ref!r})\n",
    )
    r = pull(ref, tmp_path / "root", trust=[keys["pub"]])
    assert r.install.verified and tree_snapshot(tmp_path / "root") == tree_snapshot(tree)
    push(bundle, any_store.ref("new"))  # the new code writes beside what the old one wrote
    remove(ref)
    report = gc(any_store.store, older_than=0)
    assert report.kept_reachable > 0  # "new" holds the same bundle
    remove(any_store.ref("new"))
    assert gc(any_store.store, older_than=0).deleted
    assert gc(any_store.store, older_than=0).kept == 0


def test_a_bundle_pushed_by_this_code_pulls_with_the_code_before(any_store, bundle, keys, tmp_path, old_code):
    ref = any_store.ref("new")
    push(bundle, ref)
    root = tmp_path / "root"
    _run_old(
        old_code,
        f"import cachetool, cachetool.transfer as t\nassert {str(old_code)!r} in cachetool.__file__\n"
        f"r = t.pull({ref!r}, {str(root)!r}, trust=[{str(keys['pub'])!r}])\n"
        "assert r.install.verified\n",
    )
    assert (root / "torch_compile_cache").is_dir()
