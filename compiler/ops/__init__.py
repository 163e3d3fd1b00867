"""Custom ops of the compiled models (registered on import).

- :mod:`compiler.ops.attention`: ``torch.ops.cachetool.unified_attention_with_output``, the attention op the graph
  is split at (its eager path, and the CUDA-graph-safe one below);
- :mod:`compiler.ops.static_attention`: that op's CUDA-graph-safe path, every shape and index in tensors.
"""

from compiler.ops import attention

__all__ = ["attention", "static_attention"]
