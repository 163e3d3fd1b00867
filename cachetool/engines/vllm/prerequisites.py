"""What a headless start needs before anything starts (its prerequisites): vLLM is installed for the interpreter
that runs it (:func:`python`, :func:`require_vllm`), and the model is a folder with ``config.json`` or a hub id
served from the local cache (:func:`check_model`). (A pull's *preflight* is the install's: cachetool.install.)"""

from __future__ import annotations

from pathlib import Path

from cachetool.engines.native.machine import model_presets  # a name --model must not be
from cachetool.engines.vllm import install_facts
from cachetool.errors import EngineUnavailableError, UsageError


def python() -> str:
    """The interpreter that runs vLLM: ``CACHETOOL_VLLM_PYTHON``, else this one."""
    return install_facts.vllm_python()


def require_vllm() -> str:
    """vLLM's version (of the interpreter that runs it), or :class:`EngineUnavailableError` naming how to install
    it."""
    version = install_facts.vllm_version()
    if version is None:
        raise EngineUnavailableError(
            f"--engine vllm: vLLM is not installed for {python()}; install it with "
            "scripts/install.sh --vllm (or set CACHETOOL_VLLM_PYTHON)"
        )
    return version


def check_model(model: str) -> None:
    """A model folder must hold ``config.json`` (dummy weights are built from it); a name that is no path is a
    hub id, served offline from the local Hugging Face cache, unless it is one of the native engine's presets."""
    p = Path(model).expanduser()
    looks_like_path = model.startswith((".", "/", "~")) or p.exists()
    if not looks_like_path:
        if model in model_presets():
            raise UsageError(
                f"--model {model}: a preset of the native engine; --engine vllm --model takes a model "
                "folder with config.json (or a hub id in the local Hugging Face cache)"
            )
        return
    if not p.is_dir():
        raise UsageError(f"--model {model}: not a model folder (vLLM needs a folder with config.json, or a hub id)")
    if not (p / "config.json").is_file():
        raise UsageError(f"--model {model}: the folder has no config.json")
