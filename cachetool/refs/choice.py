"""Which entry of a ref's index to take: one home for the choice, below both that make it.

A pull takes the entry of this machine's platform for a server of its engine (:func:`select_entry`; where none
fits, a one-line :class:`~cachetool.errors.CacheMissError` says why each does not); a reader (``inspect``,
``verify``, ``diff``) takes the platform named, the only one, else this machine's (:func:`choose_entry`; a tag of
several platforms, none of them this machine's, asks for ``--platform``). This machine's platform keys are the
engines' (:func:`local_platform`); the GPU is probed only where some entry is a GPU bundle.
"""

from __future__ import annotations

from collections.abc import Iterable

from cachetool.bundle import engine_rules
from cachetool.bundle.engine_rules import EngineRules
from cachetool.errors import CacheMissError, NotFoundError, UsageError
from cachetool.stores.base import RefEntry, RefIndex

__all__ = [
    "choose_entry",
    "device_to_probe",
    "entry_device",
    "entry_engine",
    "local_platform",
    "select_entry",
    "why_not",
]


def entry_engine(entry: RefEntry) -> EngineRules:
    """The engine whose server reads an entry's bundle (by what its fingerprint records)."""
    return engine_rules.catalog().for_fingerprint(entry.fingerprint)


def entry_device(entry: RefEntry) -> str:
    """``cuda`` or ``cpu``: the device the entry's fingerprint records, else the one its platform key names (a
    vLLM key starts with the engine: ``vllm0.26.0-cuda-sm90-...``)."""
    recorded = (entry.fingerprint or {}).get("device")
    if recorded:
        return "cuda" if recorded.startswith("cuda") else recorded
    return "cuda" if "cuda" in entry.platform.split("-") else "cpu"


def device_to_probe(entries: Iterable[RefEntry], device: str | None) -> str | None:
    """The device to ask :func:`cachetool.bundle.fingerprint.local_fingerprint` for: ``device`` when named, else
    None (probe the GPU) when any entry is a GPU bundle, whatever its engine, else the CPU (no NVML or torch
    asked)."""
    if device is not None:
        return device
    return None if any(entry_device(e) == "cuda" for e in entries) else "cpu"


def local_platform(
    entries: Iterable[RefEntry], device: str | None, engine: EngineRules | None
) -> tuple[list[str], dict]:
    """This machine's platform keys (for a server of ``engine``; None: one per engine whose bundles the tag
    holds, the default engine's first) and fingerprint (with those engines' facts); probes the GPU only when some
    entry is a GPU bundle."""
    from cachetool.bundle.fingerprint import local_fingerprint
    from cachetool.bundle.manifest import platform_key

    engines = engine_rules.catalog()
    entries = list(entries)
    fp = local_fingerprint(device=device_to_probe(entries, device))
    wanted = (
        [engine]
        if engine is not None
        else [engines.default()]
        + [
            e
            for e in engines.ENGINES.values()
            if e is not engines.default() and any(entry_engine(x) is e for x in entries)
        ]
    )
    keys, full = [], dict(fp)
    for eng in wanted:
        facts = eng.machine_facts(fp["device"])
        keys.append(platform_key({**fp, **facts}, eng))
        full.update({k: v for k, v in facts.items() if v is not None})
    return keys, full


def why_not(entry: RefEntry, fp: dict, engine: EngineRules | None) -> str:
    """Why ``entry`` does not fit this machine (``fp``) and a server of ``engine`` (None: any), in a few words."""
    from cachetool.bundle.fingerprint import compare

    engines = engine_rules.catalog()
    theirs = entry_engine(entry)
    if engine is not None and theirs is not engine:
        return f"a {theirs.name} bundle, not for a {engine.name} server: pull it with --engine {theirs.name}"
    diffs = compare(entry.fingerprint or {}, fp, engines.fields_ignored_by(theirs))
    return ", ".join(f"{f} {b!r} here {l!r}" for f, b, l in diffs[:3]) or "platform key differs"


def select_entry(
    index: RefIndex, ref_text: str, device: str | None = None, engine: EngineRules | None = None
) -> RefEntry:
    """The entry for this machine and a server of ``engine`` (None: any engine's, as reading a ref takes it), or
    a one-line CacheMissError saying why each entry does not fit."""
    if not index.entries:
        raise CacheMissError(f"{ref_text} holds no bundles", ref=ref_text)
    keys, fp = local_platform(index.entries, device, engine)
    for key in keys:
        for e in index.entries:
            if e.platform == key:
                return e
    reasons = "; ".join(f"{e.platform} ({why_not(e, fp, engine)})" for e in index.entries)
    raise CacheMissError(f"no bundle under {ref_text} fits this machine ({' or '.join(keys)}): {reasons}", ref=ref_text)


def choose_entry(index: RefIndex, ref_text: str, platform: str | None) -> RefEntry:
    """The entry to read: ``platform``'s, the only one, or this machine's (see the module doc)."""
    names = ", ".join(e.platform for e in index.entries) or "none"
    if platform is not None:
        for e in index.entries:
            if e.platform == platform:
                return e
        raise NotFoundError(f"{ref_text} has no platform {platform} (it has: {names})", ref=ref_text)
    if len(index.entries) == 1:
        return index.entries[0]
    if not index.entries:
        raise NotFoundError(f"{ref_text} holds no bundles", ref=ref_text)
    try:
        return select_entry(index, ref_text)
    except CacheMissError:
        raise UsageError(
            f"{ref_text} holds {len(index.entries)} platforms ({names}), none of them this machine's: "
            "choose one with --platform",
            ref=ref_text,
        ) from None
