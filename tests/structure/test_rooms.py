"""The rooms of cachetool (docs/ARCHITECTURE.md, "The rooms, bottom up"): no module imports a room after its own
(ROOMS, the lowest first), and the pull path reads top-down: each of its rooms imports only rooms after it."""

from __future__ import annotations

import re

from tests.structure.modules import ROOT, imports, modules

# The rooms of cachetool, the lowest first (docs/ARCHITECTURE.md, "The rooms"): a module imports modules of its own
# room and of rooms before it, never one after it; at any depth (a function's lazy import, ``if TYPE_CHECKING:``),
# since an import inside a function is still a call back up when it runs. So every call path, a pull's from the CLI
# down included, goes down the list: it enters each room once and never climbs back. Each name is a module or a
# package (with everything under it); ``cachetool`` is the front door's __init__ alone.
ROOMS = (
    "cachetool.version",
    "cachetool.exit_codes",
    "cachetool.errors",
    "cachetool.envs",
    "cachetool.digests",
    "cachetool.atomic",
    "cachetool.bounds",
    "cachetool.retry",
    "cachetool.process_tree",
    "cachetool.run_logs",
    "cachetool.log_lines",
    "cachetool.stop_signals",
    "cachetool.cache_root",  # the root's on-disk names: the layouts, engines, installer and transfers use them
    "cachetool.writable_root",  # a CacheRoot probed for writing
    "cachetool.layouts",  # what a cache folder holds (entries, factors) and the scan every layout shares
    "cachetool.facts",  # this machine's facts and the one comparison of recorded factors, engine-neutral
    "cachetool.bundle",  # the manifest, fingerprint, packing, .ctb, signing; what the core needs of engines
    "cachetool.stores",  # where bundles live
    "cachetool.refs",  # a ref opened, its entry for this machine chosen; ls, rm, gc
    "cachetool.install",  # a bundle source installed into a root
    "cachetool.transfer",  # push, pull (and its policy), reading a ref's bundle
    "cachetool.engines",  # the compilers, each declaring its layout, key kinds, fields; they register in the core
    "cachetool.diff",
    "cachetool.prune",
    "cachetool.results",
    "cachetool.bundle_verbs",  # pack, keygen, sign, inspect, verify, install, diff (api.py re-exports them)
    "cachetool.store_verbs",  # ls, rm, gc, prune (api.py re-exports them)
    "cachetool.api",  # every verb
    "cachetool.cli",
    "cachetool.__main__",
    "cachetool",
)


def _room_of(mod: str) -> int | None:
    """The index in :data:`ROOMS` of ``mod``'s room: the longest name that is ``mod`` or a package above it."""
    rooms = [i for i, r in enumerate(ROOMS) if mod == r or (r != "cachetool" and mod.startswith(r + "."))]
    return max(rooms, key=lambda i: len(ROOMS[i]), default=None)


def _climbs_back(imports: dict[str, list[tuple[str, str]]]) -> list[str]:
    """``where: room -> room above it`` for each import (``{module: [(where, imported module)]}``) of a room after
    the importer's."""
    back = []
    for mod, targets in imports.items():
        here = _room_of(mod)
        for where, target in targets:
            there = _room_of(target)
            if here is not None and there is not None and there > here:
                back.append(f"{where} {ROOMS[here]} -> {ROOMS[there]}")
    return list(dict.fromkeys(back))  # once per line (an import of three names is one climb)


def _cachetool_imports() -> dict[str, list[tuple[str, str]]]:
    mods = modules()
    out: dict[str, list[tuple[str, str]]] = {}
    for mod, path in mods.items():
        if mod.split(".")[0] == "cachetool":
            out[mod] = [
                (f"{path.relative_to(ROOT)}:{line}", f"{target}.{name}" if f"{target}.{name}" in mods else target)
                for line, target, name in imports(mod, path)
            ]
    return out


def test_every_module_of_cachetool_has_a_room():
    assert [m for m in modules() if m.split(".")[0] == "cachetool" and _room_of(m) is None] == []


def test_no_module_imports_a_room_above_its_own():
    """bundle/ read stores/ and transfer/ (reading a ref's bundle, the entry choice), stores/ read transfer/ (rm's
    open_ref), layouts/ the engines (the layout registry), the engines bundle/ (the entries and factors a cache
    folder holds), cache_root.py the engines: a pull walked from pull_with_policy climbed back up six times."""
    assert _climbs_back(_cachetool_imports()) == []


def test_the_rooms_are_architectures_list():
    arch = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = arch[arch.index("## The rooms, bottom up") :]
    section = section[: section.index("\n#", 1)]
    listed = section[section.index("`version`") : section.index("the front door")]
    assert ["cachetool." + name for name in re.findall(r"`(\w+)`", listed)] + ["cachetool"] == list(ROOMS)


def test_the_room_rule_catches_a_climb_back():
    imports = {
        "cachetool.bundle.reading": [("reading.py:55", "cachetool.transfer.pull")],
        "cachetool.transfer.pull": [("pull.py:9", "cachetool.bundle.source"), ("pull.py:10", "cachetool")],
        "cachetool": [("__init__.py:31", "cachetool.api")],
    }
    assert _climbs_back(imports) == [
        "reading.py:55 cachetool.bundle -> cachetool.transfer",
        "pull.py:10 cachetool.transfer -> cachetool",
    ]
    assert _room_of("cachetool.engines.vllm.child.in_vllm.child") == ROOMS.index("cachetool.engines")
    assert _room_of("cachetool.bundles") is None  # a room's name is a whole part of the dotted name


# The pull path, top-down: each room calls only rooms after it (the policy runs the pull; it does not call back
# into the API).
PULL_PATH = (
    "cachetool.cli",
    "cachetool.api",
    "cachetool.transfer.pull_policy",
    "cachetool.transfer.pull",
    "cachetool.install",
)


def _room(mod: str) -> int | None:
    return next((i for i, r in enumerate(PULL_PATH) if mod == r or mod.startswith(r + ".")), None)


def test_the_pull_path_reads_top_down():
    back = []
    for mod, path in modules().items():
        here = _room(mod)
        if here is None:
            continue
        for line, target, name in imports(mod, path):
            full = f"{target}.{name}" if name else target
            there = _room(full)
            if there is not None and there < here:
                back.append(f"{path.relative_to(ROOT)}:{line} {PULL_PATH[here]} -> {PULL_PATH[there]}")
    assert back == []
