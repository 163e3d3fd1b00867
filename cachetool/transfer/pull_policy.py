"""The pull policy an init-container relies on, as a typed outcome: every pull ends in a :class:`PullOutcome` that names
what happened (``installed``, ``already-installed``, ``not-needed`` for a server that compiles nothing, or the
failure's row of :mod:`cachetool.exit_codes`) and the exit code the policy gives it. The policy:

- ``on_miss="continue"``: every failure that leaves nothing installed (the table's continuable rows: a cache that
  is missing, stale, unreachable, slow or refused, a vLLM that fails in the key check, a bug, a full disk) ends in
  exit 0, so the server starts cold and a pod never crash-loops on the cache; only the deployment's own usage or
  configuration mistake (exit 2) still fails, so that it is seen;
- a read-only root file system with no writable temporary folder: importing torch's compiler needs one (Inductor's
  default cache folder) to compute torch's key, so a private folder inside the cache root serves, removed at the
  end (:func:`temporary_folder_for`);
- ``timeout``: the whole pull is bounded (a :class:`cachetool.bounds.Bound` that :func:`cachetool.transfer.pull.pull`
  applies), whatever phase runs at the deadline: a store that stops answering in the middle of a request, or a
  preflight that imports torch (:func:`cachetool.bounds.finish_within`); past the bound the outcome is ``timeout``,
  its message naming the phase. A thread still blocked then is abandoned, which the outcome says
  (``abandoned_threads``) so that a process can exit without joining it;
- SIGINT and SIGTERM (how Kubernetes stops an init-container) end the pull within a second, cleanly, as outcome
  ``interrupted`` (exit 130, whatever ``on_miss`` says): the staging folder removed, every unit installed whole or
  not at all, the partial downloads kept for a rerun to resume, and the message says which (:func:`stopped_message`).

:func:`pull_with_policy` runs a :class:`cachetool.transfer.pull.PullRequest` under this policy and never raises for a failure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from cachetool import exit_codes, stop_signals
from cachetool.cache_root import PARTIAL_DIR
from cachetool.errors import CachetoolError, UsageError, cause, os_error_line

if TYPE_CHECKING:
    from cachetool.transfer.pull import NotNeeded, PullRequest, PullResult

OnMiss = Literal["fail", "continue"]
ON_MISS: tuple[OnMiss, ...] = get_args(OnMiss)


class Outcome(enum.StrEnum):
    """How a pull ended: it installed, found its bundle installed, or failed with a row of the exit-code table
    (the value is the row's name, so ``pull: outcome=`` and ``--json`` show the table's words)."""

    INSTALLED = "installed"
    ALREADY_INSTALLED = "already-installed"
    NOT_NEEDED = "not-needed"  # the server compiles nothing: nothing to install (exit 0)
    ERROR = exit_codes.ERROR.name
    USAGE_ERROR = exit_codes.USAGE.name
    REFUSED = exit_codes.VERIFICATION.name
    MISS = exit_codes.MISS.name
    NOT_FOUND = exit_codes.NOT_FOUND.name
    STORE_ERROR = exit_codes.STORE.name
    TIMEOUT = exit_codes.TIMEOUT.name
    DISK_FULL = exit_codes.DISK_FULL.name
    INTERRUPTED = exit_codes.INTERRUPTED.name

    @classmethod
    def of_failure(cls, row: exit_codes.ExitCode) -> Outcome:
        """The outcome of a failure of ``row`` (one no pull ends in, ``check``'s ``compiled`` or ``diff``'s
        ``differs``, is an ``error``)."""
        try:
            return cls(row.name)
        except ValueError:
            return cls.ERROR

    @property
    def row(self) -> exit_codes.ExitCode:
        """The exit-code table's row this outcome exits with (``ok`` for one no failure row names: a success)."""
        return next((e for e in exit_codes.TABLE if e.name == self.value), exit_codes.OK)


@dataclasses.dataclass
class PullOutcome:
    """How a pull ended (see the module doc). ``result`` is the :class:`cachetool.transfer.pull.PullResult` of a pull that
    installed (or found installed); ``error`` the failure otherwise."""

    ref: str | None
    outcome: Outcome
    exit_code: int  # what the process exits with under the policy (0 for a continued failure)
    on_miss: str
    result: PullResult | None = None
    not_needed: NotNeeded | None = None  # the server compiles nothing: why
    error: BaseException | None = None
    error_exit_code: int | None = None  # the failure's own code (the table's), continued or not
    message: str = ""  # one line
    abandoned_threads: bool = False

    @property
    def installed(self) -> bool:
        return self.result is not None

    @property
    def continued(self) -> bool:
        return self.error is not None and self.exit_code == 0

    def line(self) -> str:
        """The ``pull: outcome=...`` line an init-container's log shows for every outcome."""
        if self.result is not None:
            r = self.result
            return (
                f"pull: outcome={self.outcome} ref={r.ref} exit=0 platform={r.platform} digest={r.manifest_digest} "
                f"blobs={r.blobs_downloaded} bytes={r.bytes_downloaded} seconds={r.seconds:.2f}"
            )
        if self.not_needed is not None:
            n = self.not_needed
            return (
                f"pull: outcome={self.outcome} ref={n.ref} exit=0 seconds={n.seconds:.2f} reason={n.reason}; "
                "nothing to install"
            )
        # a field the pull never learned (no ref before a flag was refused) is left out, not shown as None
        fields = {"ref": self.ref, "exit": self.exit_code, "code": self.error_exit_code, "on_miss": self.on_miss}
        return (
            f"pull: outcome={self.outcome} "
            + " ".join(f"{k}={v}" for k, v in fields.items() if v is not None)
            + f" reason={self.message}"
        )

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = self.result.to_json() if self.result is not None else {"ref": self.ref}
        if self.not_needed is not None:
            doc.update(self.not_needed.to_json())
        doc.update(
            outcome=self.outcome.value,
            exit_code=self.exit_code,
            on_miss=self.on_miss,
            installed=self.installed,
            continued=self.continued,
        )
        if self.error is not None:
            doc.update(error_exit_code=self.error_exit_code, message=self.message)
        return doc


def failure_outcome(ref: str | None, on_miss: str, exc: BaseException) -> PullOutcome:
    """The outcome of a pull that failed with ``exc``: its row of the exit-code table, continued or not."""
    code = exc.exit_code if isinstance(exc, CachetoolError) else exit_codes.for_os_error(exc).code
    row = exit_codes.for_code(code)
    exit_code = 0 if row.continuable and on_miss == "continue" else code
    return PullOutcome(
        ref=ref,
        outcome=Outcome.of_failure(row),
        exit_code=exit_code,
        on_miss=on_miss,
        error=exc,
        error_exit_code=code,
        message=one_line(exc),
    )


def success_outcome(result: PullResult | NotNeeded, on_miss: str) -> PullOutcome:
    from cachetool.transfer.pull import NotNeeded

    if isinstance(result, NotNeeded):
        return PullOutcome(ref=result.ref, outcome=Outcome.NOT_NEEDED, exit_code=0, on_miss=on_miss, not_needed=result)
    outcome = Outcome.ALREADY_INSTALLED if result.install.already_installed else Outcome.INSTALLED  # type: ignore[attr-defined]  # baseline (issue 46)
    return PullOutcome(ref=result.ref, outcome=outcome, exit_code=0, on_miss=on_miss, result=result)


def one_line(exc: BaseException) -> str:
    """A failure as one line (an OSError no layer mapped names its file)."""
    if isinstance(exc, OSError) and not isinstance(exc, CachetoolError):
        return os_error_line(exc, "pull")
    return (str(exc).splitlines() or [cause(exc)])[0]


def pull_with_policy(request: PullRequest, on_miss: str = "fail") -> PullOutcome:
    """:func:`cachetool.transfer.pull.pull` of ``request`` under the policy (``request.timeout`` bounds it, see above);
    returns the outcome, never raises for a failure of the pull (``KeyboardInterrupt`` and ``SystemExit`` pass)."""
    from cachetool.transfer.pull import pull

    abandoned = threading.Event()
    try:
        if on_miss not in ON_MISS:
            raise UsageError(f"on_miss must be one of {', '.join(ON_MISS)}, got {on_miss!r}")
        root = request.cache_root.path
        with pull_stopped_by_signals(root), temporary_folder_for(root):
            out = success_outcome(pull(request, abandoned=abandoned), on_miss)
    except Exception as exc:
        out = failure_outcome(str(request.ref), on_miss, exc)
    out.abandoned_threads = abandoned.is_set()
    return out


@contextlib.contextmanager
def temporary_folder_for(root: Path) -> Iterator[None]:
    """A usable temporary folder for this pull (see the module doc); if the root cannot be written either, one line
    says what the pull needs."""
    try:
        tempfile.gettempdir()
    except FileNotFoundError:
        pass
    else:
        yield
        return
    created = not root.exists()
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".cachetool-tmp-", dir=root)
    except OSError as exc:
        # the pod's own misconfiguration (a read-only root and no writable /tmp), which no restart fixes: usage (2),
        # which --on-miss continue does not continue, so that it is seen
        raise UsageError(
            f"pull needs a writable folder: no temporary folder is writable (TMPDIR, /tmp, /var/tmp) and the cache "
            f"root {root} cannot be written ({exc.strerror or exc}); mount an emptyDir at /tmp, or make the cache "
            "root writable"
        ) from None
    saved = tempfile.tempdir
    tempfile.tempdir = tmp
    try:
        yield
    finally:
        tempfile.tempdir = saved
        shutil.rmtree(tmp, ignore_errors=True)
        if created:
            with contextlib.suppress(OSError):
                os.rmdir(root)  # a failed pull leaves no empty root behind


def pull_stopped_by_signals(root: Path) -> contextlib.AbstractContextManager[Any]:
    """:func:`cachetool.stop_signals.stopped_by_signals` with the pull's message (:func:`stopped_message`, made once
    the pull has unwound): on SIGINT or SIGTERM the pull's worker threads stop at their next chunk and the main
    thread unwinds through the install's cleanup, which removes the staging folder; the partial downloads stay for a
    rerun. No time limit here: the pull's ``--timeout`` is its own bound (:func:`cachetool.transfer.pull.pull`), so
    that a pull outside the policy has it too."""
    return stop_signals.stopped_by_signals(lambda name: stopped_message(name, root))


def stopped_message(signal_name: str, root: Path) -> str:
    """What a stopped pull leaves, said as it is: nothing downloaded yet, or the partial downloads a rerun resumes
    (a blob's partial file is made as its download starts and kept until the install succeeds)."""
    folder = root / PARTIAL_DIR
    try:
        kept = sum(1 for e in os.scandir(folder) if e.is_file(follow_symlinks=False))
    except OSError:
        kept = 0
    if not kept:
        return (
            f"pull stopped by {signal_name} before any blob was downloaded: nothing was installed; a rerun "
            "starts from the beginning"
        )
    return (
        f"pull stopped by {signal_name}: every unit is installed whole or not at all; a rerun resumes the {kept} "
        f"partial download{'s' if kept > 1 else ''} kept in {folder}"
    )
