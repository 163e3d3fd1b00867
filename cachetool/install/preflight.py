"""Preflight: will this bundle hit here? The bundle's fingerprint (with its engine's facts) against this machine,
then the server's key (its engine's :class:`~cachetool.install.key_check.KeyCheck`: which key folder the server will
look up), then the engine's own checks of the recorded factors; each refusal names the first difference. Nothing
is downloaded or written before it passes. The engine is the bundle's (by its layout); nothing here names one."""

from __future__ import annotations

from cachetool import bounds
from cachetool.bundle import engine_rules
from cachetool.bundle.manifest import Manifest
from cachetool.errors import PreflightError
from cachetool.install.key_check import KeyCheck
from cachetool.layouts.factors import also_named, short_repr


def run_preflight(manifest: Manifest, *, device: str | None = None, key_check: KeyCheck | None = None) -> list[str]:
    """Raise :class:`PreflightError` naming the first difference; return the list of things checked.
    ``key_check``: the server's key question (``Engine.key_check``'s answer), or None."""
    from cachetool.bundle.fingerprint import compare

    engines = engine_rules.catalog()
    engine = engines.for_layout(manifest.layout)
    bundle_fp = manifest.fingerprint or {}
    dev = device or bundle_fp.get("device") or "cpu"
    local_fp = engines.machine_fingerprint(engine, dev)
    diffs = compare(bundle_fp, local_fp, engines.fields_ignored_by(engine))
    if diffs:
        field, b, l = diffs[0]
        more = also_named([d[0] for d in diffs[1:]], limit=None)
        raise PreflightError(
            f"preflight: bundle cannot hit here: fingerprint {field!r} differs: bundle {short_repr(b)}, "
            f"this machine {short_repr(l)}{more}"
        )
    checked = ["fingerprint"]
    if key_check is not None and key_check.compiles_nothing:  # no key folder is installed: none is compared
        return checked + [
            f"cache key: none needed ({key_check.compiles_nothing}); only the folders that belong to no key"
        ]
    # A difference in what the cache does not depend on (on the CPU, Triton) is no refusal, but the engine then
    # computes the compiler factors that follow from the installed files here (torch imported: seconds) instead of
    # taking them from the bundle: said, and named by a timeout reached there
    build = "; ".join(unchecked_differences(bundle_fp, local_fp, engines.fields_ignored_by(engine)))
    slow = f" (this machine's build differs: {build}: its compiler factors are computed here)" if build else ""
    if key_check is not None:  # the engine says which key folder the server will use
        with bounds.phase(f"the preflight's key check{slow}"):
            h = key_check.expected_for(manifest)
        how = key_check.describe()
        checked.append(f"cache key {h}" + (f" ({how})" if how else ""))
    # The device this machine really has (asked for cuda on a machine without a GPU: the cpu); a bundle's own
    # fingerprint may name any device string, and only a real one reaches the engine.
    local_dev = dev if local_fp["device"] == "cuda" and dev.startswith("cuda") else local_fp["device"]
    with bounds.phase(f"the preflight's factor check{slow}"):
        checked += engine.check_factors(manifest, local_dev)
    bounds.check("preflight")  # what it found past the deadline is not acted on: nothing is written
    return checked + ([f"build differs ({build}): compiler factors computed here"] if build else [])


def unchecked_differences(bundle_fp: dict, local_fp: dict, ignored: tuple[str, ...]) -> list[str]:
    """The common fingerprint fields that differ but that a cache of this bundle does not depend on (on the CPU, the
    GPU's: Triton), one phrase a field: ``"triton 3.6.0 in the bundle, 3.9.0 here"``."""
    from cachetool.bundle.fingerprint import COMMON_FIELDS, fields_that_matter

    matter = fields_that_matter(bundle_fp, ignored)
    return [
        f"{f} {bundle_fp[f]} in the bundle, {local_fp.get(f) or 'none'} here"
        for f in COMMON_FIELDS
        if f not in matter and bundle_fp.get(f) is not None and bundle_fp[f] != local_fp.get(f)
    ]
