"""Moving bundles between a store and a machine: push, pull, the init-container pull policy, a store's bundle as a
lazy source and the partial-download policy it keeps, reading a bundle (a ``.ctb`` or a ref's) for ``inspect``,
``verify`` and ``diff``, progress bars. A ref is opened and its entry chosen below, in :mod:`cachetool.refs`."""

__all__ = ["partials", "progress", "pull", "pull_policy", "push", "reading", "store_source"]
