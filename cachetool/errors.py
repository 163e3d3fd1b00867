"""Every error class of cachetool, in one place.

Every failure a user can cause (bad input, a hostile bundle, a missing ref, a store that is down) raises a
subclass of :class:`CachetoolError`. The CLI prints ``error: <message>`` on one line and exits with the
category's ``exit_code``, taken from the one table in :mod:`cachetool.exit_codes` (README's "Exit codes" is
rendered from it) so that CI jobs and Kubernetes init-containers can act on them.

The categories (one exit code each) come first, then the precise classes the modules raise, grouped by the
module that raises them; import them from here (the raising modules do not re-export them). Errors carry optional
fields besides the message, so that callers branch on data, not on message text: ``store`` (the store URL),
``ref`` (the ``name:tag`` or full ref), ``key`` (the object in a store or bundle the failure is about, and only
that: its key in the store, a tag, or the ``sha256:`` digest of a manifest or blob), ``path`` (a local path the
failure is about: a path in the cache root such as an install unit, a file of the tree being packed, a local file
such as a credentials file; earlier versions reported it as ``key``) and ``status`` (the HTTP status or S3 error
code of the failed request). A raise fills every field it knows; a layer that knows
more (the pull that a blob's check was for) adds the rest on the way up with :func:`filled`. A builtin base is
added where every catcher of that builtin would handle the error the same way (``ValueError`` for bad input,
``LookupError`` for a missing thing); not ``OSError``, which the installer catches to map file-system failures.

The pipeline's own errors (``compiler.errors.CompilerError`` and its kinds) become these classes in one place,
``cachetool/engines/native/error_mapping.py``, by kind, never by message.
"""

from __future__ import annotations

import os
import re
from typing import Any

from cachetool import exit_codes

FIELDS = ("store", "ref", "key", "path", "status")  # what an error may know besides its message (see the module doc)


class CachetoolError(Exception):
    """Base class: a failure with a one-line, user-facing message and optional fields (see the module doc)."""

    exit_code = exit_codes.ERROR.code

    def __init__(
        self,
        message: str = "",
        *,
        store: str | None = None,
        ref: str | None = None,
        key: str | None = None,
        path: str | None = None,
        status: int | str | None = None,
    ):
        super().__init__(message)
        self.store, self.ref, self.key, self.path, self.status = store, ref, key, path, status

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


def filled(exc: CachetoolError, **fields) -> CachetoolError:
    """``exc`` with the fields its raise left empty (None) set from ``fields``: a layer that knows more than the
    raise below it (the ref a tag read was for) adds it on the way up, without rewording the message."""
    for name, value in fields.items():
        if getattr(exc, name) is None:
            setattr(exc, name, value)
    return exc


def clip(text: object, limit: int = 200) -> str:
    """``text`` as one line of at most ``limit`` characters, for a message that quotes what another program said.
    A cut ends at a word boundary and is marked with " …", so no message stops mid-sentence unannounced."""
    line = " ".join(str(text).split())
    if len(line) <= limit:
        return line
    cut = line[: limit - 2].rsplit(" ", 1)[0] if " " in line[: limit - 2] else line[: limit - 2]
    return cut.rstrip(" ,;:") + " …"


def os_error_line(exc: OSError, who: str) -> str:
    """An OSError no layer mapped as one line naming its file: ``who: /path: No space left on device`` (the file
    the user knows, :func:`user_path`, not a staging or temporary one)."""
    where = f" {user_path(exc.filename)}:" if exc.filename else ""
    return f"{who}:{where} {exc.strerror or cause(exc)}"


def disk_full_cause(exc: BaseException | None) -> OSError | None:
    """The OSError of a full file system (ENOSPC, or a quota: EDQUOT) in ``exc`` or the exceptions it was raised
    from (a compiler wraps the write that failed in an error of its own), else None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, OSError) and exc.errno in exit_codes.DISK_FULL_ERRNOS:
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__ or getattr(exc, "inner_exception", None)
    return None


def disk_full(exc: OSError, doing: str, where: str | os.PathLike, outcome: str, **fields) -> DiskFullError:
    """A full file system as one line naming the folder or file the user knows (``where``, also the ``path``
    field): ``{doing}: the file system of {where} is full ({why}); {outcome}``, where ``outcome`` says what is
    left (nothing) and what to do."""
    fields.setdefault("path", os.fspath(where))
    return DiskFullError(
        f"{doing}: the file system of {os.fspath(where)} is full ({exc.strerror or cause(exc)}); {outcome}", **fields
    )


# {root}/.cachetool-staging-XXXXXXXX[/tree][/path]: an install's staging folder (cachetool.install.fs.STAGING_PREFIX)
_STAGING = re.compile(r"/\.cachetool-staging-[^/]+(?:/tree)?(?=/|$)")
# {folder}/.{name}.XXXXXXXX.tmp: an atomic write's temporary file (cachetool.atomic)
_ATOMIC_TMP = re.compile(r"(^|/)\.([^/]+)\.[A-Za-z0-9_]{8}\.tmp$")


def user_path(path: Any) -> str:
    """``path`` as the user knows it, for a message: a file inside an install's staging folder is named where it is
    installed (``{root}/{path}``), an atomic write's temporary file by the file it becomes."""
    text = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path)
    return _ATOMIC_TMP.sub(r"\1\2", _STAGING.sub("", text))


# Builtins whose class name is all they say (raised without a message): what they mean, in words
_BUILTIN_WORDS = {
    "EOFError": "unexpected end of file",
    "TimeoutError": "timed out",
    "RecursionError": "nested too deeply",
    "MemoryError": "out of memory",
}


def cause(exc: BaseException, *, detail: bool = False) -> str:
    """Why ``exc`` happened, in words for a one-line message. A Python builtin's class name is never shown (it says
    nothing a user can act on): its message (an OSError's ``strerror``, a ``KeyError``'s missing key), else the
    name in words (``ConnectionResetError`` → ``connection reset``). Another library's class name is (requests'
    ``ConnectTimeout``, botocore's ``EndpointConnectionError`` say what failed), with its message if ``detail``."""
    if isinstance(exc, KeyError) and exc.args:
        text = f"no {exc.args[0]!r}"
    elif isinstance(exc, OSError) and exc.strerror:
        text = str(exc.strerror)
    else:
        text = clip((str(exc).strip().splitlines() or [""])[0], 80)
    name = type(exc).__name__
    if type(exc).__module__ == "builtins":
        if text:
            return text
        words = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name.removesuffix("Error").removesuffix("Exception"))
        return _BUILTIN_WORDS.get(name) or words.lower() or "failed"
    return f"{name}: {text}" if detail and text else name


# ------------------------------------------------------------------------------------------------ categories
class UsageError(CachetoolError, ValueError):
    """A wrong flag, value or combination of options."""

    exit_code = exit_codes.USAGE.code


class VerificationError(CachetoolError):
    """Content or signature does not check out: tampered, unsigned, untrusted, unsafe path, size lie."""

    exit_code = exit_codes.VERIFICATION.code


class CacheMissError(CachetoolError):
    """The bundle cannot hit on this machine (a hash factor or the fingerprint differs), or no bundle fits."""

    exit_code = exit_codes.MISS.code


class NotFoundError(CachetoolError, LookupError):
    """A ref, tag, bucket, repository, bundle file or key that does not exist."""

    exit_code = exit_codes.NOT_FOUND.code


class StoreError(CachetoolError):
    """The store failed: network, credentials, server error, interrupted transfer."""

    exit_code = exit_codes.STORE.code


class WaitTimeoutError(CachetoolError):
    """A bounded wait (``pull --timeout``) ran out. (Not a builtin ``TimeoutError``: that is an ``OSError``.)"""

    exit_code = exit_codes.TIMEOUT.code


class CompileInStrictModeError(CachetoolError):
    """Something compiled although the run required a pure cache hit (``--require-hit`` / strict mode)."""

    exit_code = exit_codes.COMPILED.code


class DiskFullError(CachetoolError):
    """The file system of the cache root (or a store folder) is full: ENOSPC or a quota (EDQUOT)."""

    exit_code = exit_codes.DISK_FULL.code


class StopSignalError(CachetoolError):
    """A stop signal (SIGINT, SIGTERM) ended the operation; what it wrote was cleaned up (a pull's partial downloads
    are kept for a rerun)."""

    exit_code = exit_codes.INTERRUPTED.code


class StopRequested(KeyboardInterrupt):
    """Raised in the main thread by the handler of a stop signal (:mod:`cachetool.stop_signals`), on its way to
    becoming a :class:`StopSignalError` once the verb's processes are ended. A ``KeyboardInterrupt``, so that no
    ``except Exception`` of torch, vLLM or a store client takes it for a failure of its own, and whatever handles
    Ctrl-C (a pull keeping its partial downloads) handles a SIGTERM alike. Not a :class:`CachetoolError`: it never
    leaves the stop's block."""

    def __init__(self, signal_name: str):
        super().__init__(signal_name)
        self.signal_name = signal_name


# ------------------------------------------------------------------------------------------------ manifest.py
class ManifestError(VerificationError):
    """The manifest is malformed, non-canonical or unsafe."""


class UnsupportedSchemaError(ManifestError):
    """The manifest's schema version is not one this cachetool reads."""


class UnsafePathError(ManifestError):
    """A path would escape the cache root or is otherwise not a plain relative path."""


# ------------------------------------------------------------------------------------------------ signing.py
class KeyFileError(UsageError):
    """A key file named by the user (``--sign-key``, ``--trust``, ``CACHETOOL_TRUSTED_KEYS``) is missing or
    unreadable: a deployment mistake, so a usage error that ``pull --on-miss continue`` does not cover."""


class SignatureError(VerificationError):
    """The signature envelope is missing, malformed, untrusted or does not verify."""


class UnsignedError(SignatureError):
    """The bundle carries no signature and verification was asked for."""


class UntrustedKeyError(SignatureError):
    """The signature is by a key no trust source lists."""


class BadSignatureError(SignatureError):
    """The signature does not verify over the manifest."""


# ------------------------------------------------------------------------------------------------ bundle.py
class BundleFormatError(VerificationError):
    """A ``.ctb`` file is truncated, not a tar, or holds unexpected members."""


class IncompleteCacheError(UsageError):
    """``pack`` was given a cache whose warm did not complete (an index or an artifact missing): its units would
    replace complete ones wherever it is installed."""


# ------------------------------------------------------------------------------------------------ stores
class OversizeBlobError(VerificationError):
    """A store sent more bytes for a blob than the manifest declares (a hostile or broken store)."""


class DigestMismatchError(VerificationError):
    """What a store sent under a digest is not that content (a hostile or broken store)."""


class NotABundleError(StoreError):
    """A tag in the store holds something other than a cachetool bundle (``ls`` skips it, ``pull`` refuses it)."""


# ------------------------------------------------------------------------------------------------ install.py
class BlobVerificationError(VerificationError):
    """A blob's bytes do not match the manifest (tampered, truncated, size lie, decompression bomb)."""


class UnsafeDestinationError(VerificationError):
    """The destination holds a symlink or non-folder where the bundle needs a folder."""


class PreflightError(CacheMissError):
    """The bundle cannot hit on this machine: a fingerprint field or a hash factor differs."""


class InstallIOError(CachetoolError):
    """The filesystem refused an operation (permissions, a read-only mount, ...)."""


class ConflictError(UsageError):
    """An install unit appeared in the cache root while this install held its lock (a writer that takes no lock)."""


class UnitChangedError(CacheMissError):
    """An install unit exists with files that differ from the bundle, and the caller asked to keep it
    (``keep_changed``). A miss: the server runs with what is there (``pull --on-miss continue`` covers it)."""


class PathTooLongError(VerificationError):
    """A bundle path is longer than the cache root's file system allows (a name or the whole path)."""


class IncompleteUnitError(VerificationError):
    """A bundle's install unit is not a complete cache (what an interrupted warm leaves): never installed, so
    that it cannot replace a complete unit."""


# ------------------------------------------------------------------------------------------------ writable_root.py
class UnwritableRootError(UsageError):
    """The cache root a verb would write into cannot be written (a read-only mount, a file on its path, no
    permission): a deployment mistake, found before anything is compiled."""


# ---------------------------------------------------------------------------- engines (cachetool/engines/)
class CompilationConfigError(UsageError):
    """A bad ``--compilation-config`` / ``-cc`` value (unknown key, bad JSON, bad value), or a batch the config's
    guards refuse."""


class ModelError(UsageError):
    """The ``--model`` argument is not a preset, config.json or model folder."""


class DeviceError(UsageError):
    """The requested device is not available (``--device cuda`` without a GPU)."""


class EngineUnavailableError(UsageError):
    """The engine asked for (``--engine vllm``) is not installed where cachetool looks for it."""


class EngineLayoutError(EngineUnavailableError):
    """The installed engine release lacks what cachetool reads of it (a module or name moved): refused, naming it."""


class EngineFlagsError(UsageError):
    """The engine's own parser refused the flags after ``--``, or a flag cachetool sets itself was given."""


class EngineFailedError(CachetoolError):
    """The engine did not start or run (the message is the engine's own last error); nothing was packed."""


class EngineMissError(CacheMissError):
    """A start compiled what it should have loaded (``check --require-hit``); the message says what and why, and
    ``start`` is that start's result (an engine's ``StartResult``), for a caller to report beside the failure."""

    def __init__(self, message: str = "", *, start: Any = None, **fields):
        super().__init__(message, **fields)
        self.start = start
