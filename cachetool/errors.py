"""Error classes shared by the library and the CLI.

Every failure a user can cause (bad input, a hostile bundle, a missing ref, a store that is down) raises a
subclass of :class:`CachetoolError`. The CLI prints ``error: <message>`` on one line and exits with the
class's ``exit_code``; these codes are documented in README.md ("Exit codes") so that CI jobs and
Kubernetes init-containers can act on them. Modules define their precise subclasses next to the code that
raises them, deriving from one of the categories below.
"""

from __future__ import annotations


class CachetoolError(Exception):
    """Base class: a failure with a one-line, user-facing message."""

    exit_code = 1


class UsageError(CachetoolError):
    """A wrong flag, value or combination of options."""

    exit_code = 2


class VerificationError(CachetoolError):
    """Content or signature does not check out: tampered, unsigned, untrusted, unsafe path, size lie."""

    exit_code = 3


class CacheMissError(CachetoolError):
    """The bundle cannot hit on this machine (a hash factor or the fingerprint differs), or no bundle fits."""

    exit_code = 4


class NotFoundError(CachetoolError):
    """A ref, tag, bucket, repository, bundle file or key that does not exist."""

    exit_code = 5


class StoreError(CachetoolError):
    """The store failed: network, credentials, server error, interrupted transfer."""

    exit_code = 6


class TimeoutError_(CachetoolError):
    """A bounded wait (``pull --timeout``) ran out."""

    exit_code = 7


class CompileInStrictModeError(CachetoolError):
    """Something compiled although the run required a pure cache hit (``--require-hit`` / strict mode)."""

    exit_code = 8


class DiskFullError(CachetoolError):
    """The file system of the cache root (or a store folder) is full: ENOSPC or a quota (EDQUOT)."""

    exit_code = 9
