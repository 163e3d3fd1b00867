"""Moving bundles between a store and a machine: push, pull, the init-container pull policy, partial downloads, progress bars (a ref opened and its entry chosen: :mod:`cachetool.refs`)."""

__all__ = ["partials", "progress", "pull", "pull_policy", "push"]
