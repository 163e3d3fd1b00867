"""The exit-code policy: one table that every verb applies and README's "Exit codes" table is rendered from.

Each failure category of :mod:`cachetool.errors` takes its code from here; the CLI exits with it, ``--json`` reports
it (``exit_code``, and ``error``: the row's name), and ``pull`` names its outcome after it. ``continuable`` says
whether ``pull --on-miss continue`` turns the failure into exit 0 (the server then starts cold). The policy: the
cache is never the reason a pod does not start, so every failure that leaves nothing installed is continued (a
cache that is missing, stale, unreachable, slow or refused; a vLLM that fails in the key check; a bug in cachetool;
a full disk, which the server meets or not on its own), except the deployment's own misconfiguration (a wrong flag,
ref or key file, a cache root that cannot be one, a device the machine lacks: usage, 2), which no restart fixes and
which must be seen, and a stop signal (130: the pod is being stopped).
``tests/cli/test_contract.py`` checks that README's table and docs/deploy.md's are :func:`markdown_table`'s
output, row for row (docs/stores.md links to README's).
"""

from __future__ import annotations

import errno
from dataclasses import dataclass


@dataclass(frozen=True)
class ExitCode:
    code: int
    name: str  # the outcome / error name: ``pull: outcome=<name>``, ``--json`` ``error``
    meaning: str  # README's words
    continuable: bool  # ``pull --on-miss continue`` exits 0 for it


OK = ExitCode(
    0,
    "ok",
    "done (`pull`: `outcome=installed`, `already-installed`, or `not-needed`: the server compiles "
    "no graph, e.g. `--enforce-eager` or `-O0`, and the bundle holds nothing else it reads)",
    False,
)
ERROR = ExitCode(
    1,
    "error",
    "unexpected failure (a bug), or a local fault that is not a usage mistake (a file system "
    "that refuses a write); `--engine vllm`: vLLM did not start or failed in the key check (its own last "
    "error)",
    True,
)
USAGE = ExitCode(
    2,
    "usage-error",
    "usage or configuration: a wrong flag, value, ref, model or config key; a missing or "
    "unreadable key file (`--sign-key`, `--trust`), or no trusted key configured; a cache root that "
    "cannot be a folder, or that `warm` cannot write; a warm that did not complete, to `pack`; a device "
    "this machine lacks (`--device cuda` without CUDA); vLLM missing or refusing the flags after `--`",
    False,
)
VERIFICATION = ExitCode(
    3,
    "refused",
    "verification: tampered blob or manifest, untrusted or missing signature, unsafe "
    "path, size lie, decompression bomb",
    True,
)
MISS = ExitCode(
    4,
    "miss",
    "cache miss: a hash factor or the fingerprint differs (the message names it), or the tag "
    "has no platform for this machine or `--device`; `check --engine vllm --require-hit`: the start "
    "compiled",
    True,
)
NOT_FOUND = ExitCode(5, "not-found", "not found: ref, tag, bucket, repository, bundle file or store object", True)
STORE = ExitCode(6, "store-error", "store: network, credentials, server error, interrupted transfer", True)
TIMEOUT = ExitCode(7, "timeout", "a `--timeout` ran out (`pull`, `warm`, `check`)", True)
COMPILED = ExitCode(8, "compiled", "`check --require-hit` (native engine): something would compile", False)
DISK_FULL = ExitCode(
    9,
    "disk-full",
    "disk full: the cache root's (or a store folder's) file system is full, ENOSPC "
    "or a quota (EDQUOT); a pull leaves nothing of itself there",
    True,
)
DIFFERS = ExitCode(10, "differs", "`diff --exit-code`: A and B differ (the differences are printed)", False)
INTERRUPTED = ExitCode(
    130,
    "interrupted",
    "stopped by SIGINT (Ctrl-C) or SIGTERM (Kubernetes stopping the pod), 128 + "
    "SIGINT's number as shells report Ctrl-C: `pull` stops within a second, every unit installed "
    "whole or not at all, its partial downloads kept for a rerun to resume; `warm` and `check` "
    "end every process they started (vLLM's EngineCore and workers, compile jobs, ranks) within "
    "10 s, and `pack` refuses what they left unfinished",
    False,
)

TABLE: tuple[ExitCode, ...] = (
    OK,
    ERROR,
    USAGE,
    VERIFICATION,
    MISS,
    NOT_FOUND,
    STORE,
    TIMEOUT,
    COMPILED,
    DISK_FULL,
    DIFFERS,
    INTERRUPTED,
)
BY_CODE = {e.code: e for e in TABLE}


# What a file system says when it is full (a quota counts): exit 9 wherever such an OSError surfaces.
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def for_os_error(exc: BaseException) -> ExitCode:
    """The row of an OSError (or any exception) that no layer mapped: disk full, else an unexpected failure."""
    return DISK_FULL if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS else ERROR


def for_code(code: int) -> ExitCode:
    """The row of ``code`` (an unknown code is reported as an unexpected failure)."""
    return BY_CODE.get(code, ERROR)


def markdown_table() -> str:
    """README's "Exit codes" table."""
    rows = ["| code | name | meaning | `pull --on-miss continue` |", "|---|---|---|---|"]
    for e in TABLE:
        if e is OK:
            cont = "0"
        elif e.continuable:
            cont = f"0, `outcome={e.name}`"
        elif e in (COMPILED, DIFFERS):
            cont = "—"
        else:
            cont = f"still {e.code} (`outcome={e.name}`)"
        rows.append(f"| {e.code} | `{e.name}` | {e.meaning} | {cont} |")
    return "\n".join(rows)
