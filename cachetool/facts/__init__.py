"""Facts every engine's caches depend on, read without importing torch or ``compiler``: this machine's build and
devices (:mod:`.machine`) and how two keys' recorded factors differ (:mod:`.factor_compare`).

Engine-neutral: below the core and the engines, so both read one answer. The pipeline (``compiler``) keeps its own
readers for the keys it computes; tests/facts/test_agreement.py checks that the two agree."""

__all__ = ["devices", "factor_compare", "field_diff", "installed", "machine"]
