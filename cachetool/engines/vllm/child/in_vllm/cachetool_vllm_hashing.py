"""What a ``vllm serve`` key depends on, measured with vLLM itself while a warm runs (imported by ``child.py``:
the standard library, vLLM and torch only).

A pull has to say in milliseconds, without vLLM, whether a server launched differently from the warm computes the
warm's key folder. The answer follows from facts this module records once, from the installed vLLM and torch:

- ``options``: ``vllm serve``'s option table (every option string: its destination, how many values it takes, the
  constant a flag stores, and whether only the API server reads it), so a command line can be read as vLLM's
  parser reads it (:func:`cachetool.engines.vllm.server_command.parse`), and ``defaults`` per destination;
- ``flags``: for every engine option, whether a change of its value changes vLLM's config hash. Each option is
  changed alone on a copy of the warm's engine arguments and the config is built again (``create_engine_config``,
  10-25 ms; ~400 tries, 2-5 s a warm on a 2-core box); the result is ``hashed`` (with the config fields that
  moved), ``unhashed``, or unknown (no value of the option could be tried), and ``compiles: false`` where the
  changed server would compile nothing. An option with choices is tried with each choice;
- ``env``: the variables vLLM knows and those its compile factors hash (``vllm.envs.compile_factors``); the
  variables Inductor's and functorch's config read at import, mapped to the config fields they set (read from the
  config modules' source); and the variables vLLM's platform sets itself, with those it overrides whatever the
  server's environment says;
- ``hf_config_hashed``: whether the model's ``config.json`` (vLLM's ``hf_config``) is part of the hash.

Anything these facts cannot decide is left to vLLM itself (the pull's key child), never guessed.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import dataclasses
import json
import logging
import os
import re
from collections.abc import Callable
from typing import Any

SCHEMA = 1
# Options not tried: the model and a flag file (a pull compares them itself), what cachetool sets for a headless
# start (no weights, no tokenizer, its worker extension), and help.
NOT_TRIED = frozenset(
    {"model", "model_tag", "config", "load_format", "skip_tokenizer_init", "worker_extension_cls", "help"}
)
# Values tried for an option whose default is None, through the option's own type (the first that it takes).
UNTYPED_PROBES = ("64", "1", "0.5", "cachetool-probe")
ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]{3,}$")
SENTINEL = "cachetool-sentinel"


# ---------------------------------------------------------------------------------------------- options


def _takes(action: argparse.Action) -> int | str:
    if action.nargs == 0:
        return 0
    if action.nargs is None or action.nargs == 1:
        return 1
    if isinstance(action.nargs, int):
        return "+"
    return action.nargs if action.nargs in ("?", "*", "+") else 1


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: _jsonable(getattr(value, f.name, None)) for f in dataclasses.fields(value)}
        return repr(value)


def _const(action: argparse.Action, option: str) -> Any:
    if isinstance(action, argparse.BooleanOptionalAction):
        return not option.startswith("--no-")
    return _jsonable(action.const)


def option_table(parser: argparse.ArgumentParser, engine_dests: set[str]) -> dict[str, dict[str, Any]]:
    """``{option string: {"dest", "takes", "const", "server_only"}}`` for every option of ``parser``."""
    out: dict[str, dict[str, Any]] = {}
    for action in parser._actions:
        for option in action.option_strings:
            if action.dest == "help":
                continue
            spec: dict[str, Any] = {"dest": action.dest, "takes": _takes(action)}
            if spec["takes"] in (0, "?"):
                spec["const"] = _const(action, option)
            if action.dest not in engine_dests:
                spec["server_only"] = True
            out[option] = spec
    return dict(sorted(out.items()))


def option_defaults(parser: argparse.ArgumentParser, engine_dests: set[str]) -> dict[str, Any]:
    """The engine options' defaults that are not None (a destination missing here defaults to None)."""
    return {
        a.dest: _jsonable(a.default)
        for a in parser._actions
        if a.dest in engine_dests and a.option_strings and a.default is not None
    }


# ---------------------------------------------------------------------------------------------- flags


@contextlib.contextmanager
def _quiet_and_restored() -> Any:
    """vLLM logs every config it builds, and its platform sets variables while building one: both undone."""
    saved = dict(os.environ)
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)
        os.environ.clear()
        os.environ.update(saved)


def _candidates(action: argparse.Action, base: Any) -> list[Any]:
    """Values to try for an option whose warm value is ``base``: each other choice, the other truth value, a
    larger and a smaller number, another string; None where none can be made."""
    if action.choices is not None:
        return [c for c in action.choices if c != base]
    if action.nargs == 0 or isinstance(base, bool):
        if isinstance(action, argparse.BooleanOptionalAction) or isinstance(base, bool):
            return [not base] if isinstance(base, bool) else [True, False]
        return [action.const]
    convert = action.type if callable(action.type) else (lambda s: s)
    if isinstance(base, int):
        texts = [str(base * 2 + 1), str(max(1, base // 2))]
    elif isinstance(base, float):
        texts = [repr(base / 2), repr(base * 1.5)]
    elif isinstance(base, str):
        texts = ["cachetool-probe"]
    elif isinstance(base, (list, tuple)):
        texts = ["cachetool-probe"]
    elif base is None:
        texts = list(UNTYPED_PROBES)
    else:
        return []
    out = []
    for text in texts:
        try:
            value = convert(text)
        except Exception:  # noqa: BLE001 - a value this option refuses is simply not tried
            continue
        out.append([value] if action.nargs in ("*", "+") or isinstance(base, (list, tuple)) else value)
    return out


@dataclasses.dataclass
class Built:
    """A config built from changed engine arguments: its hash and whether the server would still compile."""

    hash: str
    compiles: bool
    config: Any


def _build(engine_args: Any, usage: Any) -> Built:
    cfg = engine_args.create_engine_config(usage)
    mode = getattr(cfg.compilation_config, "mode", None)
    return Built(cfg.compute_hash(), mode is None or int(mode) != 0, cfg)


def _sub_configs(cfg: Any) -> dict[str, Any]:
    return {
        f.name: getattr(cfg, f.name)
        for f in dataclasses.fields(cfg)
        if dataclasses.is_dataclass(getattr(cfg, f.name, None)) and hasattr(getattr(cfg, f.name), "compute_hash")
    }


def _sub_hash(sub: Any) -> str:
    try:
        return sub.compute_hash()
    except Exception as exc:  # noqa: BLE001
        return f"<unhashable: {type(exc).__name__}>"


def _moved_fields(base: Built, probe: Built, fields_of: Callable[[Any], dict]) -> list[str]:
    """The config fields a probe moved, in the sub-configs whose hashes differ (computed only for a hashed probe)."""
    out = []
    subs_a, subs_b = _sub_configs(base.config), _sub_configs(probe.config)
    for name in sorted(set(subs_a) | set(subs_b)):
        sa, sb = subs_a.get(name), subs_b.get(name)
        if sa is None or sb is None:
            out.append(f"{name} (hash)")
            continue
        if _sub_hash(sa) == _sub_hash(sb):
            continue
        a, b = fields_of(sa), fields_of(sb)
        moved = [
            k
            for k in sorted(set(a) | set(b))
            if json.dumps(a.get(k), sort_keys=True, default=str) != json.dumps(b.get(k), sort_keys=True, default=str)
        ]
        out += [f"{name}.{k}" for k in moved] or [f"{name} (hash)"]
    return out


def _try(
    engine_args: Any, dest: str, value: Any, usage: Any, base: Built, fields_of: Callable[[Any], dict]
) -> dict[str, Any] | None:
    changed = copy.deepcopy(engine_args)
    setattr(changed, dest, value)
    try:
        with _quiet_and_restored():
            probe = _build(changed, usage)
    except Exception:  # noqa: BLE001 - vLLM refuses this value: try the next one
        return None
    out: dict[str, Any] = {"hashed": probe.hash != base.hash}
    if not probe.compiles:
        out["compiles"] = False
    if out["hashed"]:
        out["fields"] = _moved_fields(base, probe, fields_of)[:8]
    return out


def flag_sensitivity(
    parser: argparse.ArgumentParser,
    engine_dests: set[str],
    engine_args: Any,
    usage: Any,
    fields_of: Callable[[Any], dict],
) -> dict[str, dict[str, Any]]:
    """For every engine option: ``{"hashed": bool, "fields": [...], "compiles": bool, "tried": value}``, per
    choice for an option with choices (``{"choices": {json value: ...}}``), or ``{"hashed": None}`` where no value
    could be tried."""
    with _quiet_and_restored():
        base = _build(copy.deepcopy(engine_args), usage)
    out: dict[str, dict[str, Any]] = {}
    for action in parser._actions:
        dest = action.dest
        if dest in NOT_TRIED or dest not in engine_dests or dest in out or not hasattr(engine_args, dest):
            continue
        current = getattr(engine_args, dest)
        if action.choices is not None:
            tried = {
                json.dumps(_jsonable(c), sort_keys=True): _try(engine_args, dest, c, usage, base, fields_of)
                for c in _candidates(action, current)
            }
            out[dest] = {"choices": {k: v for k, v in tried.items() if v is not None}}
            continue
        result = None
        for value in _candidates(action, current):
            result = _try(engine_args, dest, value, usage, base, fields_of)
            if result is not None:
                break
        out[dest] = result or {"hashed": None}
    return out


# ---------------------------------------------------------------------------------------------- environment


def _env_names_in(node: ast.AST) -> set[str]:
    return {
        n.value
        for n in ast.walk(node)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and ENV_NAME.match(n.value)
    }


def config_module_env(module: Any, prefix: str) -> tuple[dict[str, list[str]], list[str]]:
    """The variables a torch config module reads: ``({VAR: [prefix.field, ...]}, [every VAR named anywhere])``,
    from its source (an assignment whose value reads ``"VAR"`` from the environment, nested classes as dotted names)."""
    try:
        with open(module.__file__, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, TypeError):
        return {}, []
    mapped: dict[str, list[str]] = {}

    def visit(body: list[ast.stmt], scope: str) -> None:
        for stmt in body:
            if isinstance(stmt, ast.ClassDef):
                visit(stmt.body, f"{scope}{stmt.name}.")
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                names = [t.id for t in targets if isinstance(t, ast.Name)]
                for var in _env_names_in(stmt.value):
                    mapped.setdefault(var, []).extend(f"{prefix}.{scope}{n}" for n in names)

    visit(tree.body, "")
    return {k: sorted(set(v)) for k, v in sorted(mapped.items())}, sorted(_env_names_in(tree))


def forced_variables(env_before: dict[str, str], engine_args: Any, usage: Any) -> dict[str, dict[str, Any]]:
    """The variables vLLM's platform set while the warm's config was built: ``{VAR: {"value", "forced"}}``;
    forced: vLLM sets it whatever the environment held (a server's own value of it changes nothing)."""
    out: dict[str, dict[str, Any]] = {}
    for name, value in sorted(os.environ.items()):
        if env_before.get(name) == value:
            continue
        with _quiet_and_restored():
            os.environ[name] = SENTINEL
            try:
                engine_args_copy = copy.deepcopy(engine_args)
                engine_args_copy.create_engine_config(usage)
                forced = dict(os.environ).get(name) == value  # set back over the sentinel
            except Exception:  # noqa: BLE001 - not known: not forced
                forced = False
        out[name] = {"value": value, "forced": forced}
    return out


def env_facts(env_before: dict[str, str], engine_args: Any, usage: Any) -> dict[str, Any]:
    import vllm.envs as envs
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config

    inductor_map, inductor_all = config_module_env(inductor_config, "inductor")
    functorch_map, functorch_all = config_module_env(functorch_config, "functorch")
    hashed = sorted(envs.compile_factors())
    mapped = {**inductor_map, **functorch_map}
    return {
        "vllm_hashed": hashed,
        "vllm_unhashed": sorted(set(getattr(envs, "environment_variables", {})) - set(hashed)),
        "torch_config": mapped,
        "torch_config_unmapped": sorted((set(inductor_all) | set(functorch_all)) - set(mapped)),
        "set_by_vllm": forced_variables(env_before, engine_args, usage),
    }


# ---------------------------------------------------------------------------------------------- the model


def hf_config_hashed(vllm_config: Any) -> bool | None:
    """Whether the model's config.json (``model_config.hf_config``) is part of vLLM's hash: one attribute added
    to a copy of it, and the model config hashed again."""
    try:
        model = copy.copy(vllm_config.model_config)
        hf = copy.deepcopy(model.hf_config)
        hf.cachetool_probe = 1
        object.__setattr__(model, "hf_config", hf)
        return model.compute_hash() != vllm_config.model_config.compute_hash()
    except Exception:  # noqa: BLE001
        return None


def server_facts(
    parser: argparse.ArgumentParser,
    engine_dests: set[str],
    engine_args: Any,
    vllm_config: Any,
    usage: Any,
    env_before: dict[str, str],
    fields_of: Callable[[Any], dict],
) -> dict[str, Any]:
    """Everything above, as the ``hashing`` factor a warm records."""
    return {
        "schema": SCHEMA,
        "options": option_table(parser, engine_dests),
        "defaults": option_defaults(parser, engine_dests),
        "flags": flag_sensitivity(parser, engine_dests, engine_args, usage, fields_of),
        "env": env_facts(env_before, engine_args, usage),
        "hf_config_hashed": hf_config_hashed(vllm_config),
    }
