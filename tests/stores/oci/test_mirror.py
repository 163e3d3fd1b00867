"""A bundle mirrored with the ecosystem's own tool pulls from the mirror (issue 15, item 1).

Two docker-registry instances on 127.0.0.1: push to the first, ``skopeo copy`` the tag and its signature's
referrers tag to the second — with ``--all`` (the index is rewritten without artifactType), without ``--all``
(the tag points straight at the bundle manifest) and through an ``oci:`` layout folder (the air-gap hop) — then
``cachetool pull`` from the mirror verifies the signature and installs the same tree, and ``ls`` shows the tag.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid

import pytest

from cachetool.digests import hexof
from cachetool.transfer.push import push
from tests.cache_trees import tree_snapshot

pytestmark = pytest.mark.skipif(shutil.which("skopeo") is None, reason="skopeo is not installed")


def skopeo(*args: str) -> str:
    p = subprocess.run(["skopeo", *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def copy(src: str, dst: str, *, all_: bool) -> None:
    flags = (
        ["--src-tls-verify=false", "--dest-tls-verify=false"]
        if src.startswith("docker") or dst.startswith("docker")
        else []
    )
    skopeo("copy", *(["--all"] if all_ else []), *flags, src, dst)


def _mirror(src_host, dst_host, repo, tag, sig_tag, how, tmp_path) -> None:
    """skopeo copy of the bundle tag and its signature's referrers tag, the way ``how`` says."""
    for t in (tag, sig_tag):
        src, dst = f"docker://{src_host}/{repo}:{t}", f"docker://{dst_host}/{repo}:{t}"
        if how == "layout":
            layout = f"oci:{tmp_path / 'airgap'}:{t}"
            copy(src, layout, all_=True)
            copy(layout, dst, all_=True)
        else:
            copy(src, dst, all_=(how == "all"))


@pytest.mark.parametrize("how", ["all", "single", "layout"])
def test_skopeo_mirror_pulls_verifies_and_lists(how, oci_registry, oci_mirror, bundle, keys, tree, tmp_path, cli):
    repo = f"ml/tiny-{uuid.uuid4().hex[:6]}"
    r = push(bundle, f"{oci_registry.url}/{repo}:v1")
    oci_digest = r.pinned.rsplit("@", 1)[1]
    _mirror(oci_registry.host, oci_mirror.host, repo, "v1", f"sha256-{hexof(oci_digest)}", how, tmp_path)

    raw = json.loads(skopeo("inspect", "--tls-verify=false", "--raw", f"docker://{oci_mirror.host}/{repo}:v1"))
    if how == "single":
        assert raw["mediaType"] == "application/vnd.oci.image.manifest.v1+json"  # straight at the manifest
    else:
        assert "artifactType" not in raw  # what skopeo does to an index: the wrapping is not ours any more

    mirror_ref = f"{oci_mirror.url}/{repo}:v1"
    res = cli("pull", mirror_ref, "--cache-root", tmp_path / "root", "--trust", keys["pub"], "--json")
    assert res.rc == 0, res
    doc = json.loads(res.out)
    assert doc["install"]["verified"] and doc["manifest_digest"] == bundle.manifest_digest
    assert tree_snapshot(tmp_path / "root") == tree_snapshot(tree)

    res = cli("ls", f"{oci_mirror.url}/{repo}", "--json")
    assert res.rc == 0, res
    assert [row["ref"] for row in json.loads(res.out)["refs"]] == [f"{repo.rsplit('/', 1)[1]}:v1"]


def test_mirror_without_the_signature_is_refused(oci_registry, oci_mirror, bundle, keys, tmp_path, cli):
    """Trust comes from the signature over our manifest, never from the wrapping: no signature, no pull."""
    repo = f"ml/nosig-{uuid.uuid4().hex[:6]}"
    push(bundle, f"{oci_registry.url}/{repo}:v1")
    copy(f"docker://{oci_registry.host}/{repo}:v1", f"docker://{oci_mirror.host}/{repo}:v1", all_=True)
    res = cli("pull", f"{oci_mirror.url}/{repo}:v1", "--cache-root", tmp_path / "root", "--trust", keys["pub"])
    assert res.rc == 3 and "not signed" in res.error_line(), res
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize("how", ["all", "layout"])
def test_a_mirrored_compiled_cache_pulls_and_the_server_compiles_nothing(
    how, oci_registry, oci_mirror, warmed_root, keys, tmp_path, cli
):
    """The whole path through a mirror: a real tiny-model cache (``cachetool warm``) pushed, copied by skopeo,
    pulled from the mirror with the server's key checked, then ``check --require-hit`` starts hot."""
    from tests.cli_calls import run_cli

    root, warm, _ = warmed_root
    repo = f"ml/real-{uuid.uuid4().hex[:6]}"
    res = cli("push", root, f"{oci_registry.url}/{repo}:v1", "--sign-key", keys["priv"], "--json")
    assert res.rc == 0, res
    oci_digest = json.loads(res.out)["pinned"].rsplit("@", 1)[1]
    _mirror(oci_registry.host, oci_mirror.host, repo, "v1", f"sha256-{hexof(oci_digest)}", how, tmp_path)
    server_root = tmp_path / "server"
    res = cli(
        "pull",
        f"{oci_mirror.url}/{repo}:v1",
        "--cache-root",
        server_root,
        "--trust",
        keys["pub"],
        "--model",
        "tiny",
        "--json",
    )
    assert res.rc == 0, res
    assert f"cache key {warm['cache_key']}" in json.loads(res.out)["install"]["preflight"]
    check = run_cli("check", "--model", "tiny", "--cache-root", str(server_root), "--require-hit", "--json")
    assert check.returncode == 0, check.stderr[-2000:]
    result = json.loads(check.stdout.strip().splitlines()[-1])
    assert result["graphs_compiled"] == 0 and result["hot_path"] == "aot"
    assert result["workload"]["checksum"] == warm["workload"]["checksum"]
