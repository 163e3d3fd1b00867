"""The child process that runs real vLLM for a headless start or a key question, and this side of it.

- :mod:`.in_vllm`: what runs inside vLLM's own processes (the child script, the workers' probe, the hashing facts),
  a folder the child's ``PYTHONPATH`` names, importing the standard library, vLLM and torch only;
- :mod:`.process`: the child run from this side (its process group, its request, its result, its failure);
- :mod:`.env`: the environment it runs in, as the server's; :mod:`.log`: vLLM's log of it, read;
  :mod:`.progress`: a long start's heartbeat, the phase vLLM's log is in.
"""

__all__ = ["env", "in_vllm", "log", "process", "progress"]
