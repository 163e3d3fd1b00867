"""What runs inside vLLM's own processes, loaded by file path or by module name, never as this package:

- ``child.py``: run as a script by the interpreter that has vLLM (``python child.py``; see :mod:`cachetool.engines.vllm.child.process`);
- ``cachetool_vllm_probe.py``: vLLM's workers import it by name (``--worker-extension-cls
  cachetool_vllm_probe.CachetoolProbe``; this folder is on the child's ``PYTHONPATH``);
- ``cachetool_vllm_hashing.py``: what vLLM hashes of a server's command line, imported by ``child.py`` by name.

Each imports the standard library, vLLM and torch only (and one another by their top-level names).
"""

__all__ = ["cachetool_vllm_hashing", "cachetool_vllm_probe", "child"]
