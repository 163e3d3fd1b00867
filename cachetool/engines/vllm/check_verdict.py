"""``check --engine vllm`` answered before vLLM starts, where the answer is already known.

A check starts vLLM on the cache root only when the server could hit there. Two answers need no start:

- the server compiles no graph (``--enforce-eager``, ``-O0``, compilation mode NONE): no key folder to check, a
  hit by definition (``compiles: false``; vLLM's own Triton kernels, which it still JIT-compiles on a GPU, come from
  the root's ``triton_cache/`` when ``TRITON_CACHE_DIR`` points there);
- the root holds no key folder this server will use: its recorded key folders (``cache_key_factors.json`` of each
  ``torch_aot_compile/{sha256}/rank_*``) compared with the server's command line as a pull compares a bundle's
  (:class:`~cachetool.engines.vllm.key_check.ServerKeyCheck`), or none at all: a miss naming the difference, in
  seconds, with nothing compiled and nothing written;
- the installed vLLM loads compiled pieces from the path the warm saved them at, the root's were saved under
  another root and are not there (:mod:`~cachetool.engines.vllm.piece_paths`): a server on the root does not
  start, a miss naming the path.

A root whose key folders record no key inputs (one a server wrote itself) cannot be judged: vLLM starts.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from cachetool.engines.root_names import AOT, FACTORS_FILE, RANK_RE, TCC
from cachetool.engines.vllm import install_facts, piece_paths
from cachetool.errors import PreflightError
from cachetool.layouts.entries import KeyFolder


@dataclasses.dataclass
class CheckVerdict:
    """A check that did not need to start vLLM (see the module doc): the StartResult a CLI renders."""

    command: str
    model: str
    cache_root: str
    flags: list[str]
    compiles: bool  # False: the server compiles no graph
    reason: str  # why it compiles no graph, or why this root cannot hit
    cache_key: str | None = None  # the key folder the comparison was made with (the closest), if any
    seconds: float = 0.0  # what the answer cost
    how: str = ""  # how it was reached (the key check's stage)
    startup_seconds: float = 0.0  # no start
    engine: str = "vllm"

    @property
    def hit(self) -> bool:
        return not self.compiles

    @property
    def graphs_compiled(self) -> int:
        return 0

    @property
    def graphs_loaded(self) -> int:
        return 0

    def miss_reason(self) -> str | None:
        return None if self.hit else self.reason

    def pack_folder(self) -> Path:
        return Path(self.cache_root)

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(hit=self.hit, started=False, miss_reason=self.miss_reason(), graphs_compiled=0, graphs_loaded=0)
        return d

    def lines(self) -> list[str]:
        verdict = (
            f"HIT: the server compiles no graph ({self.reason})"
            if self.hit
            else f"MISS (vLLM not started): {self.reason}"
        )
        return [
            f"{self.command}: model {self.model} (vLLM not started: {self.how or 'answered beforehand'}, "
            f"{self.seconds:.2f} s)",
            f"  cache root     {self.cache_root}",
            f"  cache key      {self.cache_key or '-'}",
            f"  result         {verdict}",
        ]


def root_keys(root: Path) -> list[KeyFolder]:
    """The AOT key folders of a vLLM cache root, with the factors a warm recorded in a rank folder (None where
    none was recorded)."""
    top = Path(root) / TCC / AOT
    out = []  # type: ignore[var-annotated]  # baseline (issue 46)
    if not top.is_dir():
        return out
    for folder in sorted(p for p in top.iterdir() if p.is_dir() and not p.is_symlink()):
        factors = None
        for rank in sorted(r for r in folder.iterdir() if RANK_RE.match(r.name) and r.is_dir()):
            try:
                factors = json.loads((rank / FACTORS_FILE).read_text()).get("factors")
                break
            except (OSError, ValueError, AttributeError):
                continue
        out.append(KeyFolder(folder.name, "aot", factors))
    return out


def before_starting(check: Any, root: Path, model: str, flags: list[str]) -> CheckVerdict | None:
    """The answer a check has without starting vLLM (``check``: the server's
    :class:`~cachetool.engines.vllm.key_check.ServerKeyCheck`), or None when vLLM must start to tell."""
    if check.compiles_nothing:
        return CheckVerdict("check", model, str(root), flags, compiles=False, reason=check.compiles_nothing)
    keys = root_keys(root)
    if not keys:
        return CheckVerdict(
            "check",
            model,
            str(root),
            flags,
            compiles=True,
            reason=f"{root} holds no vLLM key folder (nothing was warmed or pulled there)",
            how="the root read",
        )
    bound = piece_paths.note(root, install_facts.vllm_version(), missing_only=True)
    if bound is not None:
        return CheckVerdict(
            "check", model, str(root), flags, compiles=True, reason=f"the root cannot hit: {bound}", how="the root read"
        )
    if any(k.factors is None for k in keys):
        return None  # a folder a server wrote itself may be this server's: only vLLM can tell
    try:
        check.key_among(keys)  # a predicted hit: the start then tells whether it really loads
    except PreflightError as exc:
        reason = str(exc).removeprefix("preflight: bundle cannot hit here: ")
        return CheckVerdict(
            "check",
            model,
            str(root),
            flags,
            compiles=True,
            reason=f"the root cannot hit: {reason}",
            seconds=check.seconds,
            how=check.stage,
        )
    return None
