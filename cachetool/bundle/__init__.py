"""A bundle: its manifest, the paths it may hold, packing and the `.ctb` file, reading, signing and trust, where an install reads it from, and the facts it records (fingerprint, key factors)."""

__all__ = ["entries", "factors", "fingerprint", "manifest", "packing", "paths", "reading", "signing", "source", "trust"]
