"""Shared test setup. The real S3 (Ceph RGW) and OCI (docker-registry) servers live in tests/servers.py as
session-scoped fixtures: started on 127.0.0.1 on first use, stopped by pid at the end of the session."""

pytest_plugins = ["tests.servers"]


import pytest


class CLIResult:
    """What one in-process ``cachetool`` call returned: exit code, stdout, stderr."""

    def __init__(self, rc, out, err):
        self.rc, self.out, self.err = rc, out, err

    def __repr__(self):
        return f"rc={self.rc}\nout={self.out}\nerr={self.err}"

    def error_line(self) -> str:
        """The one ``error:`` line (asserts there is exactly one, and that it is short)."""
        lines = [ln for ln in self.err.splitlines() if ln.startswith("error: ")]
        assert len(lines) == 1, self
        assert len(lines[0]) < 400, lines[0]
        return lines[0]


@pytest.fixture
def cli(capsys):
    """Run ``cachetool ARGS...`` in this process (fast: torch is imported once) and capture its output."""
    from cachetool.cli import main

    def run(*args) -> CLIResult:
        capsys.readouterr()
        rc = main([str(a) for a in args])
        c = capsys.readouterr()
        return CLIResult(rc, c.out, c.err)

    return run

