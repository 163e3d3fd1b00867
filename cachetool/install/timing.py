"""Where an install's time goes, phase by phase (``InstallResult.phases``, printed by benchmarks/bench_install.py).

The phases that run one after another are timed on the wall clock. Staging runs in worker threads: each worker adds
the seconds it spends reading, verifying and writing, and the stage's wall time is split between those three in
proportion (:meth:`PhaseClock.phases`), so that the phases add up to the install's wall time."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

STAGE_PARTS = ("read", "verify", "write")  # what a staging worker does with each blob


class PhaseClock:
    def __init__(self) -> None:
        self._wall: dict[str, float] = {}
        self._work: dict[str, float] = dict.fromkeys(STAGE_PARTS, 0.0)
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase that runs alone (on the wall clock); ``"stage"`` is the one split into its parts."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._wall[name] = self._wall.get(name, 0.0) + time.perf_counter() - t0

    def add_work(self, seconds: dict[str, float]) -> None:
        """A worker's seconds in each of :data:`STAGE_PARTS` (added once per batch of blobs, not per blob)."""
        with self._lock:
            for part, s in seconds.items():
                self._work[part] += s

    def phases(self) -> dict[str, float]:
        """Wall seconds by phase, in the order they ran, the stage replaced by its parts."""
        out: dict[str, float] = {}
        work = sum(self._work.values())
        for name, wall in self._wall.items():
            if name != "stage":
                out[name] = wall
                continue
            for part in STAGE_PARTS:
                out[part] = wall * self._work[part] / work if work else (wall if part == "write" else 0.0)
        return out
