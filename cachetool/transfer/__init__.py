"""Moving bundles between a store and a machine: push, pull, the init-container pull policy, partial downloads, progress bars, reading a ref's index."""

__all__ = ["partials", "progress", "pull", "pull_policy", "push", "ref_reading"]
