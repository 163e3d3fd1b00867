"""cachetool: warm, bundle, sign, push and pull torch.compile caches."""

__version__ = "0.1.0"
