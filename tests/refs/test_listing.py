"""What ``ls TARGET`` lists (cachetool/refs/admin.py ``listing``), on a real file store (issue 45, item 2).

``ls file:///d/store/tiny`` was exit 5 ("…/store/tiny does not exist") while ``pull`` reads the same text as the
bundle name ``tiny`` of the store ``file:///d/store`` (its ``:latest``), and ``ls …/store/tiny:latest`` said "no refs"
of a name whose only tag is ``v1``. A target is now read as every verb reads a ref: a tag lists that tag, or names the
tags there; a bundle name lists its tags, as one listing; a store lists everything."""

from __future__ import annotations

import pytest

from cachetool.errors import NotFoundError
from cachetool.refs.admin import listing
from cachetool.transfer.push import push


@pytest.fixture
def store(tmp_path, bundle) -> str:
    """``tiny:v1``, ``tiny:v2`` and ``llama:v1`` in one file store."""
    url = f"file://{tmp_path}/store"
    for ref in ("tiny:v1", "tiny:v2", "llama:v1"):
        push(bundle, f"{url}/{ref}")
    return url


def _tags(found) -> list[str]:
    return sorted(f"{i.name}:{i.tag}" for i in found[1])


def test_a_bundle_name_without_a_tag_lists_its_tags(store):
    found = listing(f"{store}/tiny")
    assert found[0] == f"{store}/tiny" and _tags(found) == ["tiny:v1", "tiny:v2"]
    assert _tags(listing(f"{store}/tiny/")) == ["tiny:v1", "tiny:v2"]


def test_a_store_lists_every_name_and_a_tag_only_itself(store):
    assert _tags(listing(store)) == ["llama:v1", "tiny:v1", "tiny:v2"]
    assert _tags(listing(f"{store}/tiny:v2")) == ["tiny:v2"]


def test_a_tag_that_is_not_there_is_not_found_and_the_tags_there_are_named(store):
    with pytest.raises(NotFoundError) as e:
        listing(f"{store}/tiny:latest")
    assert "v1" in str(e.value) and "v2" in str(e.value)


def test_a_name_the_store_lacks_is_not_found_and_the_names_there_are_named(store, tmp_path):
    with pytest.raises(NotFoundError) as e:
        listing(f"{store}/mistral")
    assert "tiny" in str(e.value) and "llama" in str(e.value)
    with pytest.raises(NotFoundError):  # no store and no store above: the target itself is what is missing
        listing(f"file://{tmp_path}/nowhere/tiny")


def test_a_folder_that_is_a_store_is_listed_as_a_store(tmp_path, bundle):
    """A store folder whose path ends in a valid name is the store, even beside a store above it."""
    push(bundle, f"file://{tmp_path}/store/tiny/inner:v1")
    push(bundle, f"file://{tmp_path}/store/tiny:v1")
    assert _tags(listing(f"file://{tmp_path}/store/tiny")) == ["inner:v1"]
