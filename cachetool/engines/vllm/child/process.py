"""The vLLM child process run from this side (:func:`run_child`): ``child.py`` started by the interpreter that has
vLLM, in a process group of its own that ends with the run, its request on stdin, its result read back, its
failure raised as cachetool's error."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import BinaryIO

from cachetool import process_tree
from cachetool.engines.vllm import install_facts, releases
from cachetool.engines.vllm.child.env import PROBE_DIR, child_env
from cachetool.engines.vllm.child.log import last_log_error, log_note
from cachetool.engines.vllm.headless import tensor_parallel_size
from cachetool.engines.vllm.prerequisites import python
from cachetool.errors import EngineFailedError, EngineFlagsError, EngineLayoutError, WaitTimeoutError

CHILD = PROBE_DIR / "child.py"


def run_child(request: dict, cache_root: Path | None, log: BinaryIO, *, timeout: float | None = None) -> dict:
    """Run the child with ``request`` (on its stdin) and vLLM's output into ``log``; its result (read from an
    unlinked file, so that nothing is left behind whatever happens), or the one-line error (vLLM's last) as an
    exception. ``cache_root`` None: the child uses a scratch root of its own and removes it. However the run ends
    (done, ``timeout``, a stop signal), the child's process group goes with it (:func:`process_tree.end_group`)."""
    tp = tensor_parallel_size(request["argv"])
    with tempfile.TemporaryFile() as result_file:
        fd = result_file.fileno()
        body = json.dumps({**request, "result_fd": fd, "scratch_root": cache_root is None}).encode()
        # its own process group: vLLM's EngineCore, workers and compile jobs inherit it, so they end with it
        proc = subprocess.Popen(
            [python(), str(CHILD)],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_env(cache_root, tp),
            pass_fds=(fd,),
            start_new_session=True,
            preexec_fn=process_tree.die_with_parent,
        )
        try:
            proc.communicate(body, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise WaitTimeoutError(f"vLLM did not finish within {timeout:g} s{log_note(log)}") from None
        finally:  # done, timed out or interrupted (a stop signal): nothing of the child's outlives it
            process_tree.end_group(proc.pid)
            proc.wait()
        result_file.seek(0)
        text = result_file.read()
    if not text:
        raise EngineFailedError(
            f"vLLM exited with code {proc.returncode} before reporting: {last_log_error(log)}{log_note(log)}"
        )
    result = json.loads(text)
    if not result.get("ok"):
        if result.get("layout"):
            raise EngineLayoutError(
                f"vLLM {install_facts.vllm_version()}: {result.get('error')} "
                "(cachetool is tested with "
                f"vLLM {releases.described_range('cpu')} on the CPU, "
                f"{releases.described_range('cuda')} on CUDA)"
            )
        cls = EngineFlagsError if result.get("usage") else EngineFailedError
        raise cls(f"{result.get('error')}{log_note(log)}")
    return result
