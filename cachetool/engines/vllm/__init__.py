"""Real vLLM as an engine (``--engine vllm``), run headless in a child process. See docs/vllm.md.

- :mod:`.engine`: :class:`VllmEngine`, the :class:`~cachetool.engines.base.Engine` it is;
- :mod:`.start`: one headless start (warm, check) in named phases; :mod:`.prerequisites`, :mod:`.headless` (the
  server's command line as a start takes it), :mod:`.child` (the child process that imports vLLM:
  :mod:`.child.in_vllm`, run from this side by :mod:`.child.process`), :mod:`.root_files` (the kernels and key
  folders counted), :mod:`.result` (:class:`~.result.VllmStartResult`), :mod:`.record` (a warm's key inputs);
- :mod:`.key`, :mod:`.launch`: its key inputs recorded and compared; :mod:`.key_check`: pull's key question;
- :mod:`.install_facts`: what vLLM's install is (the facts its caches depend on), read without importing vLLM;
  :mod:`.releases`: the tested ones;
- :mod:`.layout`: its cache tree as a bundle layout.
"""

from cachetool.engines.vllm.engine import VllmEngine

__all__ = ["VllmEngine"]
