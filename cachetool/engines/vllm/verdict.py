"""The verdict on a server launched otherwise than the warm, from what the warm recorded, without vLLM or torch.

A pull (and ``check``) knows the server's model, ``config.json``, flags and environment; the warm recorded its
own (the ``launch`` factor) and what vLLM hashes of them (the ``hashing`` factor,
:mod:`cachetool.engines.vllm.child.in_vllm.cachetool_vllm_hashing`). Every difference between the two is sorted
into one of three:

- **hashed**: it changes vLLM's key (another vLLM or torch, another model path, a ``config.json`` field, a flag
  whose change moved the config hash when the warm tried it, a variable in vLLM's compile factors, an Inductor
  setting read from the environment, a changed traced file): a miss, named;
- **unhashed**: vLLM's hash does not see it (a flag the warm tried that left the hash as it was, ``--seed``,
  ``--served-model-name``; a vLLM variable outside its compile factors; a variable vLLM's platform sets itself);
- **unknown**: nothing recorded decides it (a flag the warm could not try, a JSON option such as
  ``--compilation-config``, a ``--config`` file, an unread token, a variable torch or a library reads elsewhere,
  a variable vLLM reads while it builds its config outside its compile factors: ``launch.READ_BY_CONFIG``):
  only vLLM itself can answer, so the key check asks it (seconds).

A difference that is hashed makes a miss whatever else differs; no hashed and no unknown difference is a hit.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from cachetool.engines.vllm import server_command
from cachetool.engines.vllm.launch import READ_BY_CONFIG, model_config_digest, read_config_json
from cachetool.layouts.factors import UNSET, Difference, Factors

# The first hashed difference named is the one a user set on purpose (see key.TELLING for config fields).
CATEGORY_ORDER = ("compiler", "config", "flag", "env", "inductor", "code")


@dataclasses.dataclass
class Verdict:
    """The differences between a server and a warm, sorted (see the module doc)."""

    hashed: list[Difference] = dataclasses.field(default_factory=list)
    unhashed: list[str] = dataclasses.field(default_factory=list)
    unknown: list[str] = dataclasses.field(default_factory=list)

    @property
    def hit(self) -> bool:
        return not self.hashed and not self.unknown

    @property
    def decided(self) -> bool:
        """A miss (something hashed differs) or a hit: vLLM need not be asked."""
        return bool(self.hashed) or not self.unknown

    def misses(self) -> list[Difference]:
        return sorted(
            self.hashed,
            key=lambda d: CATEGORY_ORDER.index(d.category) if d.category in CATEGORY_ORDER else len(CATEGORY_ORDER),
        )


def judge(
    factors: Factors,
    *,
    model: str,
    flags: list[str],
    env: Mapping[str, str],
    versions: Mapping[str, str | None],
    traced: Mapping[str, str | None],
) -> Verdict:
    """Sort every difference between the warm that recorded ``factors`` and a server (its model, its flags without
    the model and without server-only options, its launch environment, the vLLM and torch ``versions`` here, and
    the traced files as this installation has them). The recorded facts are read defensively: a part of another
    shape than the warm writes is an unknown, never an exception."""
    launch = factors.values("launch") or {}
    hashing = factors.values("hashing") or {}
    out = Verdict()
    if not launch or hashing.get("schema") != 1:
        out.unknown.append("the bundle records no hashing facts (warmed by an older cachetool)")
        return out
    _versions(launch, versions, out)
    _model(launch, model, hashing, out)
    _flags([str(t) for t in _list(launch.get("flags"))], flags, hashing, out)
    _env({str(k): str(v) for k, v in _obj(launch.get("env")).items()}, env, hashing, factors, out)
    _code(factors.values("code") or {}, traced, out)
    return out


def _obj(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


# ---------------------------------------------------------------------------------------------- the phases


def _versions(launch: Mapping[str, Any], here: Mapping[str, str | None], out: Verdict) -> None:
    for name in ("vllm", "torch"):
        if server_command.canonical(launch.get(name)) != server_command.canonical(here.get(name)):
            out.hashed.append(Difference("compiler", name, launch.get(name, UNSET), here.get(name) or UNSET))


def _model(launch: Mapping[str, Any], model: str, hashing: Mapping[str, Any], out: Verdict) -> None:
    """vLLM hashes the model's path (``model_config.model``) and its ``config.json`` (``hf_config``)."""
    if server_command.canonical(launch.get("model")) != server_command.canonical(model):
        out.hashed.append(Difference("config", "model_config.model", launch.get("model", UNSET), model))
    recorded = launch.get("config_json") if isinstance(launch.get("config_json"), dict) else None
    here = read_config_json(model)
    if recorded is None or here is None:
        if launch.get("model_config") != model_config_digest(model):
            out.unknown.append("config.json")
        return
    for key in sorted(set(recorded) | set(here), key=str):
        a, b = recorded.get(key, UNSET), here.get(key, UNSET)
        if server_command.canonical(a) == server_command.canonical(b):
            continue
        name = f"model_config.hf_config.{key}"
        if hashing.get("hf_config_hashed") is True:
            out.hashed.append(Difference("config", name, a, b))
        elif hashing.get("hf_config_hashed") is False:
            out.unhashed.append(f"config.json {key}")
        else:
            out.unknown.append(f"config.json {key}")


def _flags(recorded: list[str], server: list[str], hashing: Mapping[str, Any], out: Verdict) -> None:
    table = _obj(hashing.get("options"))
    warm, here = server_command.parse(recorded, table), server_command.parse(server, table)
    for token in here.unread + [t for t in warm.unread if t not in here.unread]:
        out.unknown.append(f"flag {token}")
    defaults = _obj(hashing.get("defaults"))
    rules = _obj(hashing.get("flags"))
    for dest in sorted(set(warm.values) | set(here.values)):
        a, b = warm.values.get(dest, defaults.get(dest)), here.values.get(dest, defaults.get(dest))
        if server_command.same_value(a, b):
            continue
        spelled = here.given.get(dest) or warm.given.get(dest) or dest
        rule = _rule_for(rules.get(dest), b)
        if rule is None or not isinstance(rule.get("hashed"), bool):
            out.unknown.append(f"flag {spelled}")
        elif rule["hashed"]:
            fields = ", ".join(str(f) for f in _list(rule.get("fields")))
            out.hashed.append(Difference("flag", f"{spelled} ({fields})" if fields else spelled, a, b))
        else:
            out.unhashed.append(f"flag {spelled}")


def _rule_for(rule: Mapping[str, Any] | None, value: Any) -> Mapping[str, Any] | None:
    """The recorded verdict of an option for ``value``: per choice for an option with choices."""
    if not isinstance(rule, dict) or "choices" not in rule:
        return rule if isinstance(rule, dict) else None
    choices = _obj(rule["choices"])
    number = server_command.as_number(value) if isinstance(value, str) else None
    keys = [json.dumps(value, sort_keys=True)]
    if number is not None:
        keys += [json.dumps(int(number) if number == int(number) else number)]
    found = next((choices[k] for k in keys if k in choices), None)
    return found if isinstance(found, dict) else None


def _env(
    recorded: Mapping[str, str], here: Mapping[str, str], hashing: Mapping[str, Any], factors: Factors, out: Verdict
) -> None:
    facts = _obj(hashing.get("env"))
    set_by_vllm = _obj(facts.get("set_by_vllm"))
    vllm_hashed = {str(n) for n in _list(facts.get("vllm_hashed"))}
    vllm_unhashed = {str(n) for n in _list(facts.get("vllm_unhashed"))}
    torch_config = _obj(facts.get("torch_config"))
    unmapped = {str(n) for n in _list(facts.get("torch_config_unmapped"))}
    inductor = factors.values("inductor") or {}
    warm_values = factors.values("env") or {}
    for name in sorted(set(recorded) | set(here)):
        a, b = recorded.get(name), here.get(name)
        if a == b:
            continue
        if _obj(set_by_vllm.get(name)).get("forced") is True:
            out.unhashed.append(f"env {name} (vLLM sets it)")
        elif name in vllm_hashed:
            if b is not None and _same_setting(warm_values.get(name), b):
                out.unhashed.append(f"env {name} (same value)")
            else:
                out.hashed.append(Difference("env", name, UNSET if a is None else a, UNSET if b is None else b))
        elif name in READ_BY_CONFIG:
            if READ_BY_CONFIG[name](a) == READ_BY_CONFIG[name](b):
                out.unhashed.append(f"env {name} (vLLM's config reads it alike)")
            else:
                out.unknown.append(f"env {name} (read while vLLM builds its config)")
        elif name in vllm_unhashed or name.startswith("VLLM_"):
            out.unhashed.append(f"env {name}")
        elif name in torch_config:
            fields = [f for f in _list(torch_config[name]) if isinstance(f, str) and f in inductor]
            if fields:
                out.hashed.append(
                    Difference("inductor", fields[0], inductor[fields[0]], f"{name}={UNSET if b is None else b}")
                )
            else:
                out.unhashed.append(f"env {name} (not in vLLM's Inductor factors)")
        else:
            out.unknown.append(f"env {name}" + (" (read by torch's config)" if name in unmapped else ""))


def _same_setting(parsed: Any, raw: str) -> bool:
    """A raw variable that vLLM parses to the warm's recorded value (``1``/``true`` for True, ``256`` for 256)."""
    if isinstance(parsed, bool):
        return raw.strip().lower() in (("1", "true") if parsed else ("0", "false"))
    return server_command.same_value(parsed, raw)


def _code(recorded: Mapping[str, str], traced: Mapping[str, str | None], out: Verdict) -> None:
    for fid, digest in sorted(recorded.items(), key=lambda item: str(item[0])):
        here = traced.get(fid, digest)
        if here != digest:
            out.hashed.append(Difference("code", fid, digest, UNSET if here is None else here))
