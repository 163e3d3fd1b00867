"""The tests mirror the package: a test file sits in the folder of the room it tests (tests/stores/oci/ for
cachetool/stores/oci/, tests/compiler/distributed/ for compiler/distributed/, tests/test_errors.py for
cachetool/errors.py) or in a folder of tests that cross the rooms (:data:`CROSS_CUTTING`); helpers that several
folders share are modules of tests/, not a folder's conftest or test module; the scheduler's fixture names, every
path a doc, comment or test cites and every module they import name files that exist."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.structure.modules import ROOT

TESTS = ROOT / "tests"

# Folders of tests that are no room's: what a user deploys and runs end to end, and the rules and the setup of the
# tests themselves.
CROSS_CUTTING = {
    "deploy": "ci/, scripts/ and the docs' examples, as a user deploys them",
    "e2e": "the deploy path end to end, each step its own process",
    "harness": "the test setup itself (tests/servers.py, tests/server_run.py, tests/toolchain/)",
    "structure": "the rules the tree keeps",
}
# A last folder below an engine's that holds the tests starting the real engine: its conftest marks them by folder
# (tests/engines/vllm/real/conftest.py: marked vllm, and CI fails without vLLM).
REAL = "real"


def _room(rel: str) -> Path | None:
    """The package folder a test file at ``rel`` (relative to the repository) tests, or None where it sits in a
    cross-cutting folder; a path that is no package folder where it sits in no room."""
    folders = list(Path(rel).parts[1:-1])
    if not folders:
        return ROOT / "cachetool" / f"{Path(rel).name.removeprefix('test_')}"
    if folders[0] in CROSS_CUTTING:
        return None
    if folders[-1] == REAL and len(folders) == 3 and folders[0] == "engines":
        folders = folders[:-1]
    return ROOT.joinpath(*folders) if folders[0] == "compiler" else ROOT.joinpath("cachetool", *folders)


def _misplaced(rels: list[str]) -> list[str]:
    """The test files of ``rels`` that sit in no room's folder: at the top of tests/, one named after no module of
    cachetool/; below it, one in a folder that mirrors no package folder."""
    bad = []
    for rel in rels:
        room = _room(rel)
        if room is None:
            continue
        placed = room.is_file() if room.suffix == ".py" else (room / "__init__.py").is_file()
        if not placed:
            bad.append(rel)
    return bad


def _test_files() -> list[str]:
    return [str(p.relative_to(ROOT)) for p in sorted(TESTS.rglob("test_*.py"))]


def test_every_test_file_sits_in_the_folder_of_the_room_it_tests():
    assert _misplaced(_test_files()) == []


def test_the_mirror_rule_catches_what_it_names():
    fine = [
        "tests/stores/test_a.py",
        "tests/stores/oci/test_a.py",
        "tests/test_errors.py",
        "tests/cli/test_a.py",
        "tests/engines/vllm/real/test_a.py",
        "tests/compiler/distributed/test_a.py",
        "tests/deploy/test_a.py",
        "tests/e2e/x/test_a.py",
    ]
    misplaced = [
        "tests/bundles/test_a.py",
        "tests/test_nothing.py",
        "tests/stores/real/test_a.py",
        "tests/engines/vllm/real/x/test_a.py",
        "tests/tp/test_a.py",
        "tests/compiler/tp/test_a.py",
        "tests/engines/real/test_a.py",
    ]
    assert _misplaced(fine + misplaced) == misplaced


def test_every_folder_of_tests_is_a_package():
    """Test modules are imported by their dotted names (tests.stores.oci.test_refs), so two files of one name in
    two folders never clash; a folder without __init__.py had its modules imported by their bare names."""
    folders = {p.parent for p in TESTS.rglob("*.py")}
    assert sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").is_file()) == []


def _imported(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of a module of tests/ in ``path`` (``from tests.x import y`` of a module y
    counts as tests.x.y)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        out += [
            (node.lineno, n)
            for n in names
            if n.split(".")[0] == "tests" and ROOT.joinpath(*n.split(".")).with_suffix(".py").is_file()
        ]
    return out


def test_helpers_are_modules_of_tests_not_test_modules_or_other_folders_conftests():
    """A test module imports no test module (test_unfinished_marks took its trees from test_vllm_bundles,
    test_oci_concurrency from test_oci_packs), and a conftest only of its own folder or one above it (whose
    fixtures it has anyway): what several folders share is a module of tests/ (cache_trees, cli_calls, ...)."""
    bad = []
    for path in sorted(TESTS.rglob("*.py")):
        rel = path.relative_to(ROOT)
        for line, module in _imported(path):
            target = ROOT.joinpath(*module.split(".")).with_suffix(".py")
            if target.name.startswith("test_"):
                bad.append(f"{rel}:{line} imports the test module {module}")
            elif target.name == "conftest.py" and not path.parent.is_relative_to(target.parent):
                bad.append(f"{rel}:{line} imports another folder's {module}")
    assert bad == []


def test_the_scheduler_knows_the_server_fixtures_by_names_that_exist():
    """tests/conftest.py tells a unit that uses the real S3 or OCI server by its fixtures' names: a renamed fixture
    would silently send its files to the back of the queue."""
    import tests.servers
    from tests.conftest import SERVER_FIXTURES

    assert sorted(name for name in SERVER_FIXTURES if not callable(getattr(tests.servers, name, None))) == []


# A path of tests/, or of a module of either package, as docs, comments and tests cite it
CITED = re.compile(r"(?<![\w/.~$-])(tests/[\w/.+-]*[\w+/]|(?:cachetool|compiler)/[\w/]+\.py)")
CITING = (
    "README.md",
    "docs/**/*.md",
    "cachetool/**/*.py",
    "compiler/**/*.py",
    "tests/**/*.py",
    "benchmarks/**/*",
    "scripts/*",
    "ci/**/*",
    ".ci/*",
    "pyproject.toml",
)


def _cited_files() -> list[Path]:
    return [
        path
        for pattern in CITING
        for path in sorted(ROOT.glob(pattern))
        if path.is_file() and "__pycache__" not in path.parts and path != Path(__file__)
    ]


def test_every_path_a_doc_comment_or_test_cites_exists():
    """The test paths that docs and comments cite (a test moved leaves them stale) and the modules they name (the
    structure rules cited the helpers of a module named warmup long after it was gone). This file's own made-up
    paths aside."""
    stale = []
    for path in _cited_files():
        text = path.read_text(errors="replace")
        stale += [
            f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1} {m.group(1)}"
            for m in CITED.finditer(text)
            if not (ROOT / m.group(1)).exists()
        ]
    assert stale == []


# An import of a module of tests/ or of either package, as code and the docs' examples write it
IMPORTED = re.compile(
    r"^[ \t>]*(?:from[ \t]+((?:tests|cachetool|compiler)(?:\.\w+)*)[ \t]+import\b"
    r"|import[ \t]+((?:tests|cachetool|compiler)(?:\.\w+)*))",
    re.M,
)


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_every_module_a_doc_benchmark_or_script_imports_exists():
    """The dotted imports of the same files: pytest imports the tests' own (a stale one fails collection), but
    not a benchmark's or a doc's example, nor a lazy import inside a function (benchmarks/bench_stores.py still
    imported tests.bundles.fixtures after the cache trees moved to tests/cache_trees.py)."""
    stale = []
    for path in _cited_files():
        text = path.read_text(errors="replace")
        stale += [
            f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1} {m.group(1) or m.group(2)}"
            for m in IMPORTED.finditer(text)
            if not _is_module(m.group(1) or m.group(2))
        ]
    assert stale == []
