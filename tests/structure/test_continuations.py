"""No backslash line continuation in cachetool/, compiler/, benchmarks/ and scripts/*.py: a statement continues
in parentheses (a space after a backslash breaks the code)."""

from __future__ import annotations

from tests.structure.modules import ROOT

CONTINUATION_TREES = ("cachetool", "compiler", "benchmarks")  # and scripts/*.py


def _backslash_continuations(source: str) -> list[int]:
    """Lines that end in a backslash continuing the statement (one in a string or a comment continues nothing)."""
    import io
    import tokenize

    lines = source.splitlines()
    skip = (tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING, tokenize.ENDMARKER)
    found, prev = [], None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in skip:
            continue
        # tokenize emits no NL for a backslash-newline: the next token starts on a later line with none between
        if (
            prev is not None
            and prev.type not in (tokenize.NEWLINE, tokenize.NL)
            and tok.start[0] > prev.end[0]
            and lines[prev.end[0] - 1].rstrip().endswith("\\")
        ):
            found.append(prev.end[0])
        prev = tok
    return found


def test_no_backslash_continuations():
    """A statement continues in parentheses, never after a backslash (a space after it breaks the code)."""
    files = [p for tree in CONTINUATION_TREES for p in sorted((ROOT / tree).rglob("*.py"))]
    files += sorted((ROOT / "scripts").glob("*.py"))
    bad = [f"{p.relative_to(ROOT)}:{line}" for p in files for line in _backslash_continuations(p.read_text())]
    assert bad == []


def test_the_continuation_rule_catches_what_it_names():
    src = (
        'x = 1 + \\\n    2\nif (a and\n        b):\n    y = "a \\\\"  # a comment \\\n'
        's = """one \\\ntwo"""\nwith open(a) as f, \\\n        open(b) as g:\n    pass\n'
        'z = f"{x}" \\\n    f"{y}"\n'
    )
    assert _backslash_continuations(src) == [1, 8, 11]
