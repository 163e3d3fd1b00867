"""One bound for a time limit and a stop (issue 46, item 3).

``pull --timeout`` reached the layers below in two ways at once: a :class:`cachetool.bounds.Bound` in a context
variable and a ``deadline`` threaded through ``StoreSource``, ``install_bundle`` and ``lock_root``, which checked it
again with their own messages. Now the bound alone carries it (:mod:`cachetool.bounds`): no function of the stores,
the sources or the install takes a deadline, and the wait for the root's lock ends with whatever bound is applied,
a stop request included. And ``stopped_by_signals`` is one function; a wrapper says what it adds in its name."""

from __future__ import annotations

import ast
import fcntl
import os
import re
import threading
import time
from pathlib import Path

import pytest

from cachetool import bounds
from cachetool.errors import StopSignalError, WaitTimeoutError
from cachetool.install.fs import lock_root

PACKAGE = Path(__file__).resolve().parents[2] / "cachetool"
# the layers below a verb, which read the operation's bounds and take none as an argument
BELOW = ("install", "stores", "transfer", "bundle", "refs")
DEADLINE = re.compile(r"deadline|timeout_at")  # a point in time handed down (a verb's ``timeout`` seconds is its own)


def _deadlines_passed(tree: ast.AST) -> list[str]:
    """``line: name`` of each parameter (of a def or lambda) or ``self.`` attribute that carries a deadline."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            found += [
                f"{node.lineno}: {p.arg}"
                for p in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg)
                if p is not None and DEADLINE.search(p.arg)
            ]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and DEADLINE.search(node.attr)
        ):
            found.append(f"{node.lineno}: self.{node.attr}")
    return sorted(found, key=lambda hit: int(hit.split(":")[0]))


def test_no_deadline_is_threaded_below_the_verbs():
    bad = [
        f"{path.relative_to(PACKAGE.parent)}:{hit}"
        for room in BELOW
        for path in sorted((PACKAGE / room).rglob("*.py"))
        for hit in _deadlines_passed(ast.parse(path.read_text(), str(path)))
    ]
    assert bad == [], "apply a bounds.Bound (bounds.applied) instead of passing a deadline down"


def test_the_deadline_rule_catches_what_it_names():
    src = (
        "class StoreSource:\n"
        "    def __init__(self, store, *, deadline=None):\n"
        "        self.deadline = deadline\n"
        "def install_bundle(source, root, options, *, key_check=None, deadline: float | None = None): ...\n"
        "def lock_root(root_fd, root, timeout_at): ...\n"
        "def pull(request, timeout=None): ...\n"
    )
    assert _deadlines_passed(ast.parse(src)) == ["2: deadline", "3: self.deadline", "4: deadline", "5: timeout_at"]


def test_stopped_by_signals_is_one_function():
    defined = [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.lstrip("_") == "stopped_by_signals"
    ]
    assert len(defined) == 1 and defined[0].startswith("cachetool/stop_signals.py:"), defined


@pytest.fixture
def held_root(tmp_path):
    """A cache root whose lock another open file holds (as another install would), and an fd to lock it with."""
    other = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(other, fcntl.LOCK_EX)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield tmp_path, fd
    os.close(fd)
    os.close(other)


def test_the_wait_for_the_root_lock_ends_at_the_applied_deadline(held_root):
    root, fd = held_root
    t0 = time.monotonic()
    with bounds.applied(bounds.Bound.timeout(0.3)), pytest.raises(WaitTimeoutError) as err:
        lock_root(fd, root)
    assert 0.3 <= time.monotonic() - t0 < 0.3 + 1.0
    assert "install lock" in str(err.value) and "--timeout 0.3 s" in str(err.value), err.value


def test_the_wait_for_the_root_lock_ends_at_a_stop_request(held_root):
    root, fd = held_root
    stop = bounds.Bound()
    threading.Timer(0.2, stop.stop, args=("SIGTERM",)).start()
    with bounds.applied(stop), pytest.raises(StopSignalError) as err:
        lock_root(fd, root)
    assert "install lock" in str(err.value) and "SIGTERM" in str(err.value), err.value


def test_the_root_lock_is_taken_once_it_is_free_under_a_bound(tmp_path):
    other = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(other, fcntl.LOCK_EX)
    threading.Timer(0.2, os.close, args=(other,)).start()  # the other install ends
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with bounds.applied(bounds.Bound.timeout(30)):
            lock_root(fd, tmp_path)
        probe = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with pytest.raises(BlockingIOError):  # held by this fd now
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(probe)
    finally:
        os.close(fd)
