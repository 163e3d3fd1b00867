"""Custom ops of the compiled models (registered on import)."""

from compiler.ops import attention  # noqa: F401  (registers torch.ops.cachetool.*)
