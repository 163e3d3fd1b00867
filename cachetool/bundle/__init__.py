"""A bundle: its manifest, the paths it may hold, packing and the `.ctb` file, signing and trust, where an install
reads it from, and the machine facts it records (fingerprint; its key folders' factors are
:mod:`cachetool.layouts.factors`)."""

__all__ = ["ctb", "fingerprint", "manifest", "packing", "paths", "signing", "source", "trust"]
