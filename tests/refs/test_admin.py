"""What ``rm`` and ``ls`` do to a store's tags (cachetool/refs/admin.py), on a real file store: one platform's
entry removed and the others kept, the last one taking the tag with it, and the refusals, each a one-line error
that changes nothing."""

from __future__ import annotations

import pytest

from cachetool.errors import NotFoundError, UsageError
from cachetool.refs.admin import list_refs, remove, without_platform
from cachetool.refs.opening import open_ref, read_index
from cachetool.stores.addresses import parse_ref
from cachetool.stores.base import RefIndex
from cachetool.transfer.push import push


@pytest.fixture
def two_platform_tag(tmp_path, bundle, cuda_bundle) -> str:
    """``llama:v1`` holding this machine's entry and an H200's."""
    ref = f"file://{tmp_path}/store/llama:v1"
    push(bundle, ref)
    push(cuda_bundle, ref)
    return ref


def _index_of(ref: str) -> RefIndex:
    r, st, _ = open_ref(ref)
    with st:
        return read_index(st, r)


def _platforms(ref: str) -> list[str]:
    return [e.platform for e in _index_of(ref).entries]


def test_removing_one_platform_keeps_the_others(two_platform_tag, local_platform, cuda_bundle):
    h200 = cuda_bundle.manifest.platform
    left = remove(two_platform_tag, platform=h200)
    assert [e.platform for e in left.entries] == [local_platform]
    assert _platforms(two_platform_tag) == [local_platform]


def test_removing_the_last_platform_removes_the_tag(two_platform_tag, local_platform, cuda_bundle, tmp_path):
    remove(two_platform_tag, platform=cuda_bundle.manifest.platform)
    assert remove(two_platform_tag, platform=local_platform) is None
    assert list_refs(f"file://{tmp_path}/store") == []


def test_a_platform_the_tag_lacks_is_not_found_and_nothing_changes(two_platform_tag, local_platform, cuda_bundle):
    before = _platforms(two_platform_tag)
    with pytest.raises(NotFoundError) as e:
        remove(two_platform_tag, platform="cuda-sm100-torch2.11.0+cu130")
    assert str(e.value) == (f"{two_platform_tag} has no cuda-sm100-torch2.11.0+cu130 entry (has {', '.join(before)})")
    assert _platforms(two_platform_tag) == before


def test_a_digest_pin_names_no_tag_to_remove(two_platform_tag, bundle):
    pin = two_platform_tag.rsplit(":", 1)[0] + "@" + bundle.manifest_digest
    before = _platforms(two_platform_tag)
    with pytest.raises(UsageError, match="rm removes a tag; a digest pin names no tag"):
        remove(pin)
    assert _platforms(two_platform_tag) == before


def test_removing_a_platform_is_idempotent_as_a_merging_store_needs(two_platform_tag, cuda_bundle):
    r, index = parse_ref(two_platform_tag), _index_of(two_platform_tag)
    once = without_platform(index, r, cuda_bundle.manifest.platform)
    assert without_platform(once, r, cuda_bundle.manifest.platform) == once
    assert without_platform(None, r, cuda_bundle.manifest.platform) is None


def test_list_refs_lists_each_tag_with_its_entries(two_platform_tag, tmp_path, bundle, local_platform, cuda_bundle):
    push(bundle, f"file://{tmp_path}/store/llama:v2")
    listing = {(i.name, i.tag): sorted(e.platform for e in i.entries) for i in list_refs(f"file://{tmp_path}/store")}
    assert listing == {
        ("llama", "v1"): sorted([local_platform, cuda_bundle.manifest.platform]),
        ("llama", "v2"): [local_platform],
    }


def test_the_cli_rm_of_a_missing_platform_is_one_line_and_its_exit_code(two_platform_tag, cli):
    r = cli("rm", two_platform_tag, "--platform", "cuda-sm100-torch2.11.0+cu130")
    assert r.rc == NotFoundError.exit_code, r
    assert "has no cuda-sm100-torch2.11.0+cu130 entry" in r.error_line()


def test_the_cli_rm_platform_says_what_is_left(two_platform_tag, cli, cuda_bundle, local_platform):
    r = cli("rm", two_platform_tag, "--platform", cuda_bundle.manifest.platform)
    assert r.rc == 0, r
    assert r.out.strip() == f"removed {two_platform_tag} [{cuda_bundle.manifest.platform}]; left: {local_platform}"
