"""The walk of one pull through cachetool's rooms, as it runs: which rooms a ``pull_outcome`` enters, which room
calls which, and every call that climbs back up (a room calling one after it in ``ROOMS``, the lowest first:
tests/structure/test_rooms.py). The import rule keeps the static arrows pointing down; this counts the calls, so a
call back up through an object handed down (a callback, an interface implemented above) shows too.

    python benchmarks/walk_pull.py                   # this tree
    python benchmarks/walk_pull.py --tree OLD_CHECKOUT   # another checkout (git worktree add OLD 4579352), same rooms

One native bundle (tests' cache tree, 2 ranks) is packed, signed and pushed to a file store, then pulled with
``api.pull_outcome`` under a profiler that sees every Python call of every thread.
"""

from __future__ import annotations

import argparse
import ast
import collections
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def rooms_of(repo: Path) -> tuple[str, ...]:
    """``ROOMS`` as tests/structure/test_rooms.py of ``repo`` writes it (read, not imported: another checkout may
    lack it)."""
    tree = ast.parse((repo / "tests" / "structure" / "test_rooms.py").read_text())
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "ROOMS")
    return ast.literal_eval(node.value)


def room_index(rooms: tuple[str, ...], module: str) -> int | None:
    hits = [i for i, r in enumerate(rooms) if module == r or (r != "cachetool" and module.startswith(r + "."))]
    return max(hits, key=lambda i: len(rooms[i]), default=None)


def build_ref(work: Path) -> tuple[str, Path]:
    """A signed native bundle pushed to a file store: (ref, public key)."""
    import importlib

    from cachetool import api

    # the cache trees of tests/, in this tree or in a checkout from before they moved (out of the bundles folder)
    for name in ("tests.cache_trees", "tests.bundles" + ".fixtures"):
        try:
            make_native_tree = importlib.import_module(name).make_native_tree
            break
        except ImportError:
            continue
    make_native_tree(work / "tree")
    api.keygen(work / "k.key")
    ref = f"file://{work}/store/m:v1"
    api.push(work / "tree", ref, sign_key=work / "k.key")
    return ref, work / "k.key.pub"


class Walk:
    """Calls between cachetool's modules, each attributed to the nearest cachetool frame below it."""

    def __init__(self, rooms: tuple[str, ...]):
        self.rooms = rooms
        self.module_edges: collections.Counter[tuple[str, str]] = collections.Counter()
        self.lock = threading.Lock()

    def profile(self, frame, event, arg):
        if event != "call":
            return
        callee = frame.f_globals.get("__name__", "")
        if not callee.startswith("cachetool"):
            return
        caller_frame = frame.f_back
        while caller_frame is not None and not caller_frame.f_globals.get("__name__", "").startswith("cachetool"):
            caller_frame = caller_frame.f_back
        caller = caller_frame.f_globals["__name__"] if caller_frame is not None else "(outside)"
        if caller != callee:
            with self.lock:
                self.module_edges[(caller, callee)] += 1

    def room(self, module: str) -> str:
        i = room_index(self.rooms, module)
        return self.rooms[i].removeprefix("cachetool.") if i is not None else module

    def report(self) -> None:
        room_edges: collections.Counter[tuple[str, str]] = collections.Counter()
        for (a, b), n in self.module_edges.items():
            if a != "(outside)" and self.room(a) != self.room(b):
                room_edges[(self.room(a), self.room(b))] += n
        climbs = sorted(
            (a, b)
            for a, b in room_edges
            if room_index(self.rooms, "cachetool." + b) > room_index(self.rooms, "cachetool." + a)
        )
        modules = {m for edge in self.module_edges for m in edge if m != "(outside)"}
        entered = collections.Counter(b for a, b in self.module_edges if a != "(outside)")
        print(f"modules entered: {len(modules)}; rooms entered: {len({self.room(m) for m in modules})}")
        print(f"module-to-module call edges: {len(self.module_edges)}; room-to-room edges: {len(room_edges)}")
        print(f"room edges that climb back up: {len(climbs)}")
        for a, b in climbs:
            sites = sorted(
                f"{x} -> {y}"
                for (x, y) in self.module_edges
                if x != "(outside)" and self.room(x) == a and self.room(y) == b
            )
            print(f"  {a} -> {b}: {', '.join(sites)}")
        print(
            "modules entered from the most other modules:", ", ".join(f"{m} ({n})" for m, n in entered.most_common(5))
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, default=REPO, help="the checkout to walk (default: this one)")
    args = ap.parse_args()
    rooms = rooms_of(REPO)
    sys.path.insert(0, str(args.tree.resolve()))
    from cachetool import api

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ref, pub = build_ref(work)
        walk = Walk(rooms)
        threading.setprofile(walk.profile)
        sys.setprofile(walk.profile)
        try:
            outcome = api.pull_outcome(ref, work / "root", trust=[pub])
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
    print(f"tree {args.tree}; pull outcome: {outcome.outcome}")
    walk.report()


if __name__ == "__main__":
    main()
