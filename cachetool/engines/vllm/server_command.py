"""A ``vllm serve`` command line read as vLLM reads it, without importing vLLM or torch.

vLLM's ``FlexibleArgumentParser`` rewrites the flags before argparse sees them, and a pull must follow the same
rules to tell two command lines apart in milliseconds:

- ``--max_model_len`` is ``--max-model-len`` (underscores in an option's name are dashes);
- ``-O3``, ``-O=3`` and ``-O 3`` are ``--optimization-level 3``;
- a dotted option (``-cc.mode=0``, ``--compilation-config.cudagraph_mode FULL``) is a piece of that option's JSON
  dict; pieces of one option are merged, then the dict counts as one value of the option;
- ``--opt=value`` is ``--opt value``; a repeated option's last value wins.

Two questions are answered here:

- :func:`compiles_nothing`: does this server run the model eagerly (``--enforce-eager``, ``-O0``, compilation
  mode NONE, ``TORCH_COMPILE_DISABLE=1``)? vLLM 0.26 to 0.32 then compile nothing at all (``VllmConfig``'s
  ``__post_init__`` sets the mode to NONE), so there is nothing to pull, check or warm;
- :func:`parse`: the option values a command sets, by vLLM's destination name, read with the option table a warm
  recorded from vLLM's own parser (:mod:`cachetool.engines.vllm.child.in_vllm.cachetool_vllm_hashing`).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

# The option that every spelling of -O becomes, and the compilation config's dict option (and its short form).
OPTIMIZATION_LEVEL = "--optimization-level"
COMPILATION_CONFIG = ("--compilation-config", "-cc")
# The compilation mode's spellings that mean "no torch.compile" (CompilationMode.NONE, an IntEnum whose name vLLM
# also accepts; "level" is the key's name before vLLM 0.11).
NONE_MODES = ("0", "none", "no_compilation")
_UNDERSCORED_NAME = re.compile(r"(?<=--)[^.=]*")


def _dashes(token: str) -> str:
    """``--a_b[.c_d][=v_w]`` as ``--a-b[.c_d][=v_w]``: only the option's own name is rewritten (vLLM's rule)."""
    return _UNDERSCORED_NAME.sub(lambda m: m.group(0).replace("_", "-"), token, count=1)


def normalized(flags: list[str] | tuple[str, ...]) -> list[str]:
    """``flags`` with vLLM's spelling rules applied (underscores, ``-O``), one token per argument as before."""
    out: list[str] = []
    flags = list(flags)
    for i, token in enumerate(flags):
        if token.startswith("--"):
            out.append(_dashes(token))
        elif token.startswith("-O") and token != "-O" and not token.startswith("-O."):
            out += [OPTIMIZATION_LEVEL, token[3:] if token[2:3] == "=" else token[2:]]
        elif token == "-O" and i + 1 < len(flags) and flags[i + 1] in {"0", "1", "2", "3"}:
            out.append(OPTIMIZATION_LEVEL)
        else:
            out.append(token)
    return out


def _json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _merge(into: dict, piece: dict) -> None:
    for k, v in piece.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


def split_dict_args(tokens: list[str]) -> tuple[list[str], dict[str, dict]]:
    """The tokens without the dotted options, and those merged into one dict per option (``-cc.mode=0
    -cc.cudagraph_mode=NONE`` is ``{"-cc": {"mode": 0, "cudagraph_mode": "NONE"}}``)."""
    rest: list[str] = []
    dicts: dict[str, dict] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        name = token.split("=", 1)[0]
        if token.startswith("-") and "." in name:
            if "=" in token:
                value = token.split("=", 1)[1]
                i += 1
            else:
                value = tokens[i + 1] if i + 1 < len(tokens) else ""
                i += 2
            option, *keys = name.split(".")
            piece: Any = _json_value(value)
            for k in reversed(keys):
                piece = {k: piece}
            _merge(dicts.setdefault(option, {}), piece)
            continue
        rest.append(token)
        i += 1
    return rest, dicts


def _last_value(tokens: list[str], names: tuple[str, ...]) -> str | None:
    """The value the last of ``names`` is given (``--x v`` or ``--x=v``), or None."""
    found = None
    for i, token in enumerate(tokens):
        name, eq, value = token.partition("=")
        if name in names:
            found = value if eq else (tokens[i + 1] if i + 1 < len(tokens) else None)
    return found


def _is_none_mode(value: Any) -> bool:
    return str(value).strip().lower() in NONE_MODES


def compiles_nothing(flags: list[str] | tuple[str, ...], env: Mapping[str, str]) -> str | None:
    """Why a ``vllm serve`` with these flags (without the model) and this environment compiles nothing, or None
    when it compiles. ``--enforce-eager`` and ``TORCH_COMPILE_DISABLE=1`` set the mode to NONE whatever else is
    given; otherwise an explicit compilation mode decides, else ``-O``'s level (``-O0``: no compilation)."""
    tokens, dicts = split_dict_args(normalized(flags))
    eager = None
    for token in tokens:
        if token in ("--enforce-eager", "--no-enforce-eager"):
            eager = token
    if eager == "--enforce-eager":
        return "--enforce-eager: vLLM runs the model eagerly (torch.compile and CUDA graphs off)"
    if env.get("TORCH_COMPILE_DISABLE") == "1":
        return "TORCH_COMPILE_DISABLE=1: vLLM runs the model without torch.compile"
    mode = None
    whole = _last_value(tokens, COMPILATION_CONFIG)
    if whole is not None and isinstance(_json_value(whole), dict):
        config = _json_value(whole)
        mode = config.get("mode", config.get("level"))
    for option in COMPILATION_CONFIG:
        piece = dicts.get(option) or {}
        mode = piece.get("mode", piece.get("level", mode))
    if mode is not None:
        return f"compilation mode {mode}: vLLM runs the model without torch.compile" if _is_none_mode(mode) else None
    level = _last_value(tokens, (OPTIMIZATION_LEVEL,))
    if level is not None and level.strip() == "0":
        return "-O0: vLLM runs the model without torch.compile or CUDA graphs"
    return None


def split_model(flags: list[str], model: str | None) -> tuple[str | None, list[str]]:
    """The model a server's command line names (``vllm serve M``'s positional tag, ``--model M``, else
    ``model``) and the flags without it."""
    rest = list(flags)
    found = None
    if rest and not rest[0].startswith("-"):
        found = rest.pop(0)
    out = []
    i = 0
    while i < len(rest):
        name, eq, value = rest[i].partition("=")
        if name == "--model":
            found = value if eq else (rest[i + 1] if i + 1 < len(rest) else None)
            i += 1 if eq else 2
            continue
        out.append(rest[i])
        i += 1
    return found or model, out


# ---------------------------------------------------------------------------------------------- parse


@dataclasses.dataclass(frozen=True)
class Parsed:
    """The option values a command line sets, by vLLM's destination name, and what could not be read."""

    values: dict[str, Any]  # dest -> a raw string, a list of them, a JSON dict (dotted or JSON options), or a const
    given: dict[str, str]  # dest -> the option as the command spells it (for messages)
    unread: list[str]  # tokens that are no option of the recorded table (a positional, an abbreviation)


def parse(flags: list[str] | tuple[str, ...], table: Mapping[str, Mapping[str, Any]]) -> Parsed:
    """``flags`` (without the model) read with a recorded option table: ``{option string: {"dest", "takes":
    0 | 1 | "?" | "*" | "+", "const"}}`` (:func:`cachetool_vllm_hashing.option_table`)."""
    tokens, dicts = split_dict_args(normalized(flags))
    values: dict[str, Any] = {}
    given: dict[str, str] = {}
    unread: list[str] = []
    i = 0
    while i < len(tokens):
        name, eq, inline = tokens[i].partition("=")
        spec = table.get(name) if name.startswith("-") else None
        if not (isinstance(spec, dict) and isinstance(spec.get("dest"), str)):
            unread.append(tokens[i])
            i += 1
            continue
        dest, takes = spec["dest"], spec.get("takes", 1)
        i += 1
        if takes == 0:
            value: Any = spec.get("const")
        elif eq:
            value = [inline] if takes in ("*", "+") else inline
        elif takes in ("*", "+"):
            value = []
            while i < len(tokens) and not tokens[i].startswith("-"):
                value.append(tokens[i])
                i += 1
        elif takes == "?" and (i >= len(tokens) or tokens[i].startswith("-")):
            value = spec.get("const")
        else:
            value = tokens[i] if i < len(tokens) else None
            i += 1
        if isinstance(value, str) and spec.get("json"):
            value = _json_value(value)
        values[dest] = value
        given[dest] = name
    for option, piece in dicts.items():
        spec = table.get(option)
        if not (isinstance(spec, dict) and isinstance(spec.get("dest"), str)):
            unread.append(f"{option}.*")
            continue
        current = values.get(spec["dest"])
        merged = dict(current) if isinstance(current, dict) else {}
        _merge(merged, piece)
        values[spec["dest"]] = merged
        given[spec["dest"]] = option
    return Parsed(values, given, unread)


def same_value(a: Any, b: Any) -> bool:
    """Two option values as vLLM would read them: numbers by value (``"256"`` is 256, ``"0.50"`` is 0.5),
    lists element by element, anything else by its JSON text (so NaN equals NaN, and no value is unhashable)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    na, nb = as_number(a), as_number(b)
    if na is not None and nb is not None:
        return na == nb or (na != na and nb != nb)
    return canonical(a) == canonical(b)


def as_number(value: Any) -> float | None:
    """A value as a number where it reads as one (``"256"``, 0.5), else None (a truth value is no number)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def canonical(value: Any) -> str:
    """A JSON value's one text (sorted keys; NaN and infinities as JSON5 spells them; anything else by repr)."""
    return json.dumps(value, sort_keys=True, default=repr)
