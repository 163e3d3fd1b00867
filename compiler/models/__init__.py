"""The models the pipeline compiles: the Llama family, and what building and loading them takes.

- :mod:`compiler.models.llama_config`: the model config (presets, Hugging Face ``config.json``, the values that enter
  the cache key); torch-free, so that a preflight can predict a server's key without importing torch;
- :mod:`compiler.models.llama`: the model (``build_model``, ``LlamaForCausalLM``, ``resolve_model``);
- :mod:`compiler.models.parallel_layers`: the tensor-parallel linear, embedding and lm-head layers;
- :mod:`compiler.models.safetensors_io`: safetensors headers checked, tensors read and written.

Nothing is imported here: importing :mod:`compiler.models.llama_config` must not import torch.
"""

__all__ = ["llama", "llama_config", "parallel_layers", "safetensors_io"]
