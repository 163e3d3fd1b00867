"""A server's command line as a headless start takes it: the model it serves (:func:`server_model`), its tensor
parallel size (:func:`tensor_parallel_size`), and the flags the child runs with (:func:`server_argv`: the
unhashed headless ones first, the user's after them)."""

from __future__ import annotations

from cachetool.engines.vllm import server_command
from cachetool.errors import EngineFlagsError, UsageError

# What a headless start needs and a server's key does not hash (vLLM's compute_hash leaves load_config and the
# tokenizer out): given before the user's flags, so that a flag after `--` still wins.
HEADLESS_FLAGS = ("--skip-tokenizer-init",)
DUMMY_WEIGHTS = ("--load-format", "dummy")


def server_model(model: str | None, flags: list[str]) -> tuple[str, list[str]]:
    """The model a server command line serves and its flags without it: ``vllm serve M`` (a positional tag),
    ``--model M`` after ``--``, or cachetool's ``--model``; two that disagree are a usage error."""
    named, rest = server_command.split_model(flags, None)
    if named and model and named != model:
        raise EngineFlagsError(f"the model after -- ({named}) and --model ({model}) differ: name it once")
    chosen = named or model
    if not chosen:
        raise UsageError("--engine vllm needs the server's model: --model M, or M after -- as in `vllm serve M`")
    return chosen, rest


def tensor_parallel_size(flags: list[str]) -> int:
    """``-tp N`` / ``--tensor-parallel-size N`` as vLLM will read it (its parser checks the value)."""
    for i, f in enumerate(flags):
        name, _, value = f.partition("=")
        if name in ("-tp", "--tensor-parallel-size"):
            value = value or (flags[i + 1] if i + 1 < len(flags) else "")
            return int(value) if value.isdigit() else 1
    return 1


def server_argv(flags: list[str], load_weights: bool = False) -> list[str]:
    """The flags a headless start runs with: the unhashed headless ones first (a warm and a pull's key question
    set them alike, so their configs compare field by field), the user's after them (a flag after -- wins)."""
    return [*HEADLESS_FLAGS, *(() if load_weights else DUMMY_WEIGHTS), *flags]
