"""Names: no module uses a name that nothing binds (pyflakes)."""

from __future__ import annotations

from tests.structure.modules import ROOT, PACKAGES


def test_no_module_uses_a_name_nothing_binds():
    """A name used but never imported or defined (an import removed while a use stayed) fails only when that line
    runs, which for an error path may be never in the suite: pyflakes reads every module for them."""
    from pyflakes.api import checkPath
    from pyflakes.messages import UndefinedExport, UndefinedName
    from pyflakes.reporter import Reporter

    class Undefined(Reporter):
        def __init__(self):
            self.found: list[str] = []

        def flake(self, message):
            if isinstance(message, (UndefinedName, UndefinedExport)):
                self.found.append(str(message))

        def unexpectedError(self, filename, msg):
            self.found.append(f"{filename}: {msg}")

        syntaxError = unexpectedError

    reporter = Undefined()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            checkPath(str(path), reporter)
    assert reporter.found == []
