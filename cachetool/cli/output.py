"""What a verb prints: with ``--json`` exactly one JSON object on stdout for every outcome, failures included;
else its lines, and a failure as one ``error:`` line on stderr.

Every object has ``ok`` (``exit_code == 0``), ``exit_code``, ``command`` (the verb) and ``message`` (one line);
a success adds the verb's fields (a list goes inside the object, e.g. ``ls``'s ``refs``), a failure (a result whose
exit is not 0 included: ``diff --exit-code``'s ``differs``) adds
``error`` (the exit-code row's name, :mod:`cachetool.exit_codes`), the error's ``store``/``ref``/``key``/``path``/``status``
where it knows them, and what the verb recorded with :func:`add_failure_fields` (``pull``: its outcome).
:func:`begin` is called once per CLI call with its arguments; :func:`emit` prints a result, :func:`fail` a failure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import click

from cachetool import exit_codes
from cachetool.errors import FIELDS


@dataclass
class _Call:
    command: str | None = None
    as_json: bool = False
    emitted: bool = False
    failure_fields: dict[str, Any] = field(default_factory=dict)


_call = _Call()


def begin(argv: list[str]) -> None:
    """Note the verb and whether ``--json`` was given (before ``--``: after it come another engine's flags)."""
    global _call
    args = argv[: argv.index("--")] if "--" in argv else argv
    command = next((a for a in args if not a.startswith("-")), None)
    _call = _Call(command=command, as_json=command is not None and "--json" in args[args.index(command) :])


def command() -> str | None:
    return _call.command


def add_failure_fields(**fields: Any) -> None:
    """Fields a failure's JSON object carries besides the common ones (e.g. ``pull``'s ``outcome``, a failed
    start's result); the common ones (``ok``, ``exit_code``, ``command``, ``message``, ``error``) always win."""
    _call.failure_fields.update(fields)


def emit(as_json: bool, doc: dict[str, Any], text: str, *, exit_code: int = 0) -> int:
    """Print a result: ``doc`` as the one JSON object, or ``text``. Returns ``exit_code`` (the verb's exit)."""
    if not as_json:
        if text:
            click.echo(text)
        return exit_code
    message = (text.splitlines() or [""])[0]
    # a non-zero exit that is a verb's result (``diff --exit-code``: 10) is a failure like any other: its row's name
    failure = {} if exit_code == 0 else {"error": exit_codes.for_code(exit_code).name}
    _print(
        {
            **doc,
            "ok": exit_code == 0,
            "exit_code": exit_code,
            "command": _call.command,
            "message": doc.get("message", message),
            **failure,
        }
    )
    return exit_code


def fail(message: str, exit_code: int, exc: BaseException | None = None) -> int:
    """Report a failure: one ``error:`` line on stderr and, with ``--json``, its object on stdout."""
    click.echo(f"error: {message}", err=True)
    if _call.as_json and not _call.emitted:
        known = {n: getattr(exc, n) for n in FIELDS if getattr(exc, n, None) is not None}
        _print(
            {
                **known,
                **_call.failure_fields,
                "ok": False,
                "exit_code": exit_code,
                "command": _call.command,
                "message": message,
                "error": exit_codes.for_code(exit_code).name,
            }
        )
    return exit_code


def _print(doc: dict[str, Any]) -> None:
    click.echo(json.dumps(doc, sort_keys=True, default=str))  # one line: `tail -1 | jq` works
    _call.emitted = True
