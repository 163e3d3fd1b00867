"""The cache key: four factor hashes (env, config, code, compiler) and the ``hash10`` folder name.

``hash10`` is the first 10 hex digits of sha256 over the four factor hashes. Each factor's hash is
:func:`factor_hash` of its ``values`` (canonical JSON), and both are written to ``cache_key_factors.json``
(format in docs/ARCHITECTURE.md) so that a mismatch can be explained factor by factor.

Public API used by ``cachetool`` (preflight, diff): the typed :class:`CacheKey` and :class:`Factors`,
:func:`local_env_factors`, :func:`local_compiler_factors`, :func:`factor_hash`, and the one comparison of factor
values, :func:`field_differences`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import platform
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import CodeType
from typing import Any

from compiler import build_identity, envs

logger = logging.getLogger(__name__)

SCHEMA = 1
FACTOR_NAMES = ("env", "config", "code", "compiler")
FACTORS_FILE = "cache_key_factors.json"

# Inductor config entries that change nothing in generated code (workers, logging, timeouts).
_INDUCTOR_CONFIG_EXCLUDE_WORDS = (
    "worker",
    "log",
    "timeout",
    "compile_threads",
    "cache_dir",
    "trace.",
    "vec_isa_ok",
)  # vec_isa_ok only skips a build check of the detected ISA


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)


def factor_hash(values: dict[str, Any]) -> str:
    """sha256 hex of the canonical JSON of a factor's ``values``."""
    return hashlib.sha256(canonical_json(values).encode()).hexdigest()


def combine(factor_hashes: dict[str, str]) -> str:
    """``hash10``: first 10 hex of sha256 over the four factor hashes, in the fixed order."""
    text = "|".join(f"{name}:{factor_hashes[name]}" for name in FACTOR_NAMES)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


# ---------------------------------------------------------------------- env


def local_env_factors() -> dict[str, Any]:
    """Environment variables and process settings that change compiled code."""
    values: dict[str, Any] = dict(envs.env_factor_values())
    values["python"] = f"{sys.version_info.major}.{sys.version_info.minor}"
    return values


# ---------------------------------------------------------------------- compiler

# A factor value that could not be computed: visible in cache_key_factors.json and in a preflight's message, and
# never equal to a real value (two caches built where the same value failed still share it: logged each time).
UNKNOWN = "<unknown: {}>"


def _unknown(what: str, exc: BaseException) -> str:
    logger.warning(
        "cache key: %s could not be computed (%s: %s); recorded as a sentinel", what, type(exc).__name__, exc
    )
    return UNKNOWN.format(f"{what}: {type(exc).__name__}")


@functools.lru_cache(maxsize=1)
def _torch_key() -> str:
    from compiler import torch_compat

    try:
        return torch_compat.compute_torch_key()
    except Exception as exc:  # pragma: no cover - a torch without Inductor's build key
        return _unknown("torch_key", exc)


def _triton_key() -> str | None:
    from compiler import torch_compat

    return torch_compat.triton_key()


# Inductor settings the pipeline applies while it compiles and loads (see :func:`inductor_patches`).
# ``cpp_cache_precompile_headers``: the precompiled header lives in Inductor's *global* default cache dir, not in
# the redirected one, and the .so keys depend on it: a hot start on a fresh machine would run g++ again.
PIPELINE_INDUCTOR_PATCHES: dict[str, Any] = {"cpp_cache_precompile_headers": False}


def inductor_patches() -> dict[str, Any]:
    """:data:`PIPELINE_INDUCTOR_PATCHES` restricted to the keys this torch version has."""
    from compiler import torch_compat

    config = torch_compat.inductor_config()
    return {k: v for k, v in PIPELINE_INDUCTOR_PATCHES.items() if hasattr(config, k)}


def inductor_config_values() -> dict[str, Any]:
    """The Inductor config as the pipeline compiles with it (its patches applied)."""
    from compiler import torch_compat

    cfg = torch_compat.inductor_config_portable(inductor_patches())
    return {k: v for k, v in cfg.items() if not any(w in k for w in _INDUCTOR_CONFIG_EXCLUDE_WORDS)}


def _inductor_config_hash() -> str:
    try:
        return factor_hash(inductor_config_values())
    except Exception as exc:  # pragma: no cover - a torch whose config cannot be saved
        return _unknown("inductor_config", exc)


def local_compiler_factors(device: str) -> dict[str, Any]:
    """Torch build key, Triton, device name/capability, CUDA version and Inductor config for ``device``
    (imports torch and Inductor: seconds; see :func:`cheap_compiler_factors`)."""
    import torch

    dev = torch.device(device)
    values: dict[str, Any] = {
        "torch": torch.__version__,
        "torch_git": torch.version.git_version,
        "torch_key": _torch_key(),
        "device_type": dev.type,
    }
    if dev.type == "cuda":
        idx = dev.index if dev.index is not None else 0
        values["device"] = torch.cuda.get_device_name(idx)
        values["capability"] = ".".join(map(str, torch.cuda.get_device_capability(idx)))
        values["cuda"] = torch.version.cuda
        values["triton"] = build_identity.triton_version()
        values["triton_key"] = _triton_key()
    else:
        values["device"] = f"cpu-{platform.machine()}"
        values["capability"] = torch.backends.cpu.get_cpu_capability()
    values["inductor_config"] = _inductor_config_hash()
    return values


# Compiler factor values that follow from the installed files and Inductor's settings (the evidence).
_FROM_EVIDENCE = ("torch_key", "triton_key", "inductor_config")


def cheap_compiler_factors(device: str, recorded: Factor) -> dict[str, Any] | None:
    """This machine's compiler factor values without importing torch, given a recorded compiler factor (its
    values and evidence, from a ``cache_key_factors.json``) — or ``None`` when they cannot be had so.

    Versions and devices are read here (:mod:`compiler.build_identity`); the values that only torch can compute
    are taken from ``recorded`` when its evidence equals this machine's (same installed torch and Triton files,
    same Inductor settings, same Python: the same values by construction). A ``None`` means: compute them with
    :func:`local_compiler_factors`."""
    theirs = recorded.values
    if recorded.evidence is None or recorded.evidence != build_identity.evidence():
        return None
    build = build_identity.torch_build()
    kind = device.split(":")[0]
    if build is None or kind not in ("cpu", "cuda"):
        return None
    values: dict[str, Any] = {"torch": build["torch"], "torch_git": build["torch_git"], "device_type": kind}
    if kind == "cuda":
        found = build_identity.cuda_device(int(device.split(":")[1]) if ":" in device else 0)
        if found is None:
            return None
        values.update(found, cuda=build["cuda"], triton=build_identity.triton_version())
    else:
        values.update(build_identity.cpu_device())
    values.update({k: theirs[k] for k in _FROM_EVIDENCE if k in theirs})
    return values if set(values) == set(theirs) else None


# ---------------------------------------------------------------------- code


def _site_roots() -> list[str]:
    roots = {p for p in sys.path if p and os.path.isdir(p)}
    return sorted((os.path.realpath(p) for p in roots), key=len, reverse=True)


def file_id(path: str) -> str | None:
    """A path-independent identity for a traced file: its module name where one is loaded from it,
    else the path relative to the ``sys.path`` entry that holds it, else (a file outside every import root)
    its absolute path, which names it uniquely (two such files may share a base name). ``None`` for
    pseudo-files (``<eval_with_key>``, ``<string>``)."""
    if not path or path.startswith("<") or not os.path.isfile(path):
        return None
    real = os.path.realpath(path)
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if f and os.path.realpath(f) == real:
            return f"module:{name}"
    for root in _site_roots():
        if real.startswith(root + os.sep):
            return "path:" + os.path.relpath(real, root).replace(os.sep, "/")
    return "file:" + real


def traced_files(codes: Iterable[CodeType]) -> list[str]:
    files = {c.co_filename for c in codes}
    return sorted(f for f in files if file_id(f) is not None)


def file_digest(path: str | Path) -> str:
    """The code factor's value for one traced file: the sha256 hex of its content (the warm's and a pull's
    re-hash, :func:`compiler.key_prediction.rehash_code_factor`, compute it here alike)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def code_factors(files: Iterable[str]) -> dict[str, str]:
    """``{file id: sha256 of content}`` for every traced file."""
    values: dict[str, str] = {}
    for f in files:
        fid = file_id(f)
        if fid is None:
            continue
        values[fid] = file_digest(f)
    return values


# ---------------------------------------------------------------------- config


def config_factors(compilation_config: Any, model_config: dict[str, Any]) -> dict[str, Any]:
    return {"compilation_config": compilation_config.hash_values(), "model_config": model_config}


# ---------------------------------------------------------------------- comparing factor values

UNSET = "<unset>"  # the value of a field that one side lacks


@dataclass(frozen=True)
class FieldDifference:
    """One field where two factors' values differ: its dotted name and each side's value (:data:`UNSET`)."""

    field: str
    a: Any
    b: Any


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a.b": leaf}`` for every leaf of nested dicts (an empty dict is a leaf of its own)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        if not value and prefix:
            out[prefix] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


# The fields a user sets, in the order a miss should name them: what follows from them (the all-reduce choice a
# tensor-parallel size implies, the head size a hidden size implies) is named after them.
USER_SET_FIELDS = (
    "tensor_parallel_size",
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
    "architecture",
    "dtype",
    "mode",
)


def most_telling_first(diffs: list[FieldDifference]) -> list[FieldDifference]:
    """``diffs`` with the fields a user sets (:data:`USER_SET_FIELDS`, by their last dotted part) first, in that
    order, the rest after them as they were (by name)."""

    def rank(d: FieldDifference) -> int:
        leaf = d.field.rsplit(".", 1)[-1]
        return USER_SET_FIELDS.index(leaf) if leaf in USER_SET_FIELDS else len(USER_SET_FIELDS)

    return sorted(diffs, key=rank)


def field_differences(a: Any, b: Any, *, nested: bool = True) -> list[FieldDifference]:
    """Every field where two factor values differ, sorted by name: the dotted leaves of nested dicts
    (``nested``), else their top-level keys. The one comparison that the hot start's miss reason, the install
    preflight, ``diff`` and the vLLM engine's key check all name differences with."""
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return [] if same_json(a, b) else [FieldDifference("(all)", a, b)]
    fa, fb = (flatten(a), flatten(b)) if nested else (a, b)
    return [
        FieldDifference(str(k), fa.get(k, UNSET), fb.get(k, UNSET))
        for k in sorted(set(fa) | set(fb), key=str)
        if not same_json(fa.get(k, UNSET), fb.get(k, UNSET))
    ]


def same_json(a: Any, b: Any) -> bool:
    """Two recorded values are the same: equal, or the same JSON text (NaN is NaN; a value JSON cannot write is
    compared by its repr), so the comparison is total over whatever a factor file holds."""
    try:
        if a == b:
            return True
    except Exception:  # noqa: BLE001 - a value whose == raises is compared by its text below
        pass
    return json.dumps(a, sort_keys=True, default=repr) == json.dumps(b, sort_keys=True, default=repr)


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters for a one-line message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------- the factors, typed


@dataclass(frozen=True)
class Factor:
    """One hash factor as ``cache_key_factors.json`` records it: the hash, the values it hashes and, for the
    compiler factor, the build evidence written beside it (not hashed)."""

    hash: str | None
    values: dict[str, Any]
    evidence: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hash": self.hash, "values": self.values}
        if self.evidence is not None:
            out["evidence"] = self.evidence
        return out


class Factors:
    """A key folder's factors, parsed once: ``{name: {"hash", "values"[, "evidence"]}}`` as :class:`Factor`
    entries (ours: env, config, code, compiler; the vLLM engine's add ``serve``). The JSON is kept as read
    (:attr:`raw`), so another engine's factor file of any shape round-trips and can still be compared field by
    field; :attr:`structured` says whether it had one of our factors (:data:`FACTOR_NAMES`) in our shape."""

    __slots__ = ("raw", "_entries")

    def __init__(self, raw: dict[str, Any]):
        self.raw = raw
        self._entries: dict[str, Factor] = {}
        for name, entry in raw.items():
            if isinstance(entry, dict) and "values" in entry:
                values = entry["values"] if isinstance(entry["values"], dict) else {"value": entry["values"]}
                evidence = entry.get("evidence") if isinstance(entry.get("evidence"), dict) else None
                h = entry.get("hash")
                self._entries[str(name)] = Factor(h if isinstance(h, str) else None, values, evidence)

    @classmethod
    def parse(cls, data: Any) -> Factors | None:
        """Factors from JSON (or already parsed); ``None`` where there are none (not a JSON object)."""
        if isinstance(data, Factors) or data is None:
            return data
        return cls(data) if isinstance(data, dict) else None

    @classmethod
    def from_entries(cls, entries: dict[str, Factor]) -> Factors:
        return cls({name: f.to_json() for name, f in entries.items()})

    @property
    def structured(self) -> bool:
        return any(name in self._entries for name in FACTOR_NAMES)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def factor(self, name: str) -> Factor | None:
        return self._entries.get(name)

    def values(self, name: str) -> dict[str, Any] | None:
        f = self._entries.get(name)
        return None if f is None else f.values

    def hash_of(self, name: str) -> str | None:
        f = self._entries.get(name)
        return None if f is None else f.hash

    def to_json(self) -> dict[str, Any]:
        return self.raw

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Factors) and self.raw == other.raw

    def __hash__(self) -> int:
        return hash(canonical_json(self.raw))

    def __repr__(self) -> str:
        return f"Factors({', '.join(self._entries) or 'raw'})"


# ---------------------------------------------------------------------- the key


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file of its own in the same folder, then rename: two
    processes writing the same file never share a temporary name."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@dataclass(frozen=True)
class CacheKey:
    """A cache key: the ``hash10`` folder name and the factors it hashes (JSON factors are parsed on the way in)."""

    hash: str
    factors: Factors

    def __post_init__(self) -> None:
        if not isinstance(self.factors, Factors):
            object.__setattr__(self, "factors", Factors.parse(self.factors) or Factors({}))

    @classmethod
    def from_values(
        cls,
        *,
        env: dict[str, Any],
        config: dict[str, Any],
        code: dict[str, Any],
        compiler: dict[str, Any],
        evidence: dict[str, Any] | None = None,
    ) -> CacheKey:
        """``evidence`` (:func:`compiler.build_identity.evidence`) is written beside the compiler factor, not
        hashed: what lets a preflight reuse the recorded compiler values (:func:`cheap_compiler_factors`)."""
        factors = {
            name: Factor(factor_hash(values), values)
            for name, values in (("env", env), ("config", config), ("code", code), ("compiler", compiler))
        }
        if evidence is not None:
            factors["compiler"] = Factor(factors["compiler"].hash, compiler, evidence)
        return cls(hash=combine({n: f.hash for n, f in factors.items()}), factors=Factors.from_entries(factors))  # type: ignore[misc]  # baseline (issue 46)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "hash": self.hash, "factors": self.factors.to_json()}

    def write(self, directory: Path) -> Path:
        path = Path(directory) / FACTORS_FILE
        write_atomic(path, json.dumps(self.to_json(), indent=2, sort_keys=True, default=repr) + "\n")
        return path

    def write_if_changed(self, directory: Path) -> Path | None:
        """:meth:`write`, unless the folder already holds these factors: a hot start writes nothing."""
        path = Path(directory) / FACTORS_FILE
        try:
            if json.loads(path.read_text()) == json.loads(json.dumps(self.to_json(), default=repr)):
                return None
        except (OSError, ValueError):
            pass
        return self.write(directory)

    @classmethod
    def read(cls, path: Path) -> CacheKey:
        data = json.loads(Path(path).read_text())
        return cls(hash=data["hash"], factors=data["factors"])
