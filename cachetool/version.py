"""cachetool's version: what ``--version`` prints and what a manifest records as the tool that wrote it (the same
string as pyproject.toml's ``version``; tests/structure/ checks both)."""

__version__ = "0.1.0"
