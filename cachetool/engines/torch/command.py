"""What ``--engine torch`` runs, read from the arguments after ``--``: its own options, then the program's command.

::

    cachetool warm --engine torch --cache-root R -- [--ready-url URL [--request REQ]...] [--ready-timeout S]
                                                    [--stop-timeout S] [--] COMMAND ARGS...

The options end at the first argument that is not one of them (or at a second ``--``); the rest is the command,
run as given. Without ``--ready-url`` the command runs to its end (a script, a benchmark, a batch job); with it,
the command is a server: it runs until ``URL`` answers 2xx, then each ``--request`` runs in order (``REQ`` is
``[METHOD ]URL[ BODY]``: ``GET`` without a body, ``POST`` with one; a JSON body is sent as JSON), then the server
is stopped (SIGINT, then SIGTERM and SIGKILL after ``--stop-timeout``).
"""

from __future__ import annotations

import dataclasses
import json
import urllib.parse

from cachetool.errors import EngineFlagsError

__all__ = ["HELP", "ProgramCommand", "Request", "parse"]

HELP = "e.g. -- python serve.py, or -- --ready-url http://127.0.0.1:8000/health --request /generate -- python serve.py"
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
DEFAULT_READY_TIMEOUT = 600.0
DEFAULT_STOP_TIMEOUT = 30.0


@dataclasses.dataclass(frozen=True)
class Request:
    method: str
    url: str
    body: str | None = None

    @property
    def is_json(self) -> bool:
        try:
            json.loads(self.body or "")
            return True
        except ValueError:
            return False

    def describe(self) -> str:
        return f"{self.method} {self.url}" + (f" ({len(self.body)} bytes)" if self.body else "")


@dataclasses.dataclass(frozen=True)
class ProgramCommand:
    argv: tuple[str, ...]
    ready_url: str | None = None
    requests: tuple[Request, ...] = ()
    ready_timeout: float = DEFAULT_READY_TIMEOUT
    stop_timeout: float = DEFAULT_STOP_TIMEOUT

    @property
    def text(self) -> str:
        return " ".join(self.argv)

    def to_values(self) -> dict:
        """As a warm records it (the ``launch`` factor: not a fact the caches depend on)."""
        return {
            "command": list(self.argv),
            "ready_url": self.ready_url,
            "requests": [r.describe() for r in self.requests],
        }


def _url(text: str, what: str, base: str | None = None) -> str:
    url = urllib.parse.urljoin(base, text) if base and text.startswith("/") else text
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise EngineFlagsError(
            f"{what} {text!r} is not an http(s) URL"
            + (" (a path needs --ready-url's host)" if text.startswith("/") else "")
        )
    return url


def _request(text: str, base: str | None) -> Request:
    """``[METHOD ]URL[ BODY]``; a path (``/generate``) is taken on ``--ready-url``'s host."""
    method, _, rest = text.strip().partition(" ")
    if method.upper() not in METHODS:
        method, rest = ("GET", text.strip())
    url, _, body = rest.strip().partition(" ")
    method = method.upper()
    if body and method == "GET":
        method = "POST"  # a body is sent
    return Request(method, _url(url, "--request", base), body or None)


def _seconds(flag: str, value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise EngineFlagsError(f"{flag} {value!r} is not a number of seconds > 0")
    return seconds


def parse(flags: tuple[str, ...] | list[str]) -> ProgramCommand:
    """The options and the command after ``--``; a usage error in one line (:class:`EngineFlagsError`)."""
    args = list(flags)
    options: dict[str, list[str]] = {"--ready-url": [], "--request": [], "--ready-timeout": [], "--stop-timeout": []}
    while args and args[0].startswith("--") and args[0] != "--":
        name, eq, value = args.pop(0).partition("=")
        if name not in options:
            raise EngineFlagsError(
                f"unknown option {name} before the command after -- (--engine torch takes {', '.join(options)}; {HELP})"
            )
        if not eq:
            if not args:
                raise EngineFlagsError(f"{name} needs a value")
            value = args.pop(0)
        options[name].append(value)
    if args and args[0] == "--":
        args.pop(0)
    if not args:
        raise EngineFlagsError(f"--engine torch needs the program's command after -- ({HELP})")
    for name in ("--ready-url", "--ready-timeout", "--stop-timeout"):
        if len(options[name]) > 1:
            raise EngineFlagsError(f"{name} given twice")
    ready = _url(options["--ready-url"][0], "--ready-url") if options["--ready-url"] else None
    if options["--request"] and ready is None:
        raise EngineFlagsError("--request needs --ready-url: requests are sent once the server answers there")
    return ProgramCommand(
        argv=tuple(args),
        ready_url=ready,
        requests=tuple(_request(r, ready) for r in options["--request"]),
        ready_timeout=_seconds("--ready-timeout", options["--ready-timeout"][0])
        if options["--ready-timeout"]
        else DEFAULT_READY_TIMEOUT,
        stop_timeout=_seconds("--stop-timeout", options["--stop-timeout"][0])
        if options["--stop-timeout"]
        else DEFAULT_STOP_TIMEOUT,
    )
