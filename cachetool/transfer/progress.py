"""Progress bars of push and pull: rich bars on stderr, a no-op when disabled (``--json``, not a terminal, library
use). A bar ends at 100 % of what was transferred."""

from __future__ import annotations


class TransferProgress:
    """rich progress bars on stderr; a no-op when disabled (``--json``, not a terminal, library use)."""

    def __init__(self, enabled: bool):
        self._p = None
        if enabled:
            from rich.console import Console
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

            # binary units, as every size cachetool prints (KiB, MiB, GiB); rich's defaults are decimal (kB, MB, GB)
            self._p = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(binary_units=True),
                binary_speed_column(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=False,
            )

    @property
    def enabled(self) -> bool:
        return self._p is not None

    def __enter__(self):
        if self._p:
            self._p.start()
        return self

    def __exit__(self, *exc):
        if self._p:
            self._p.stop()

    def task(self, description: str, total: int):
        return self._p.add_task(description, total=total) if self._p else None

    def advance(self, task, n: int) -> None:
        if self._p and task is not None:
            self._p.advance(task, n)

    def finish(self, task) -> None:
        """End the bar at 100 % of what was transferred (blobs of units already installed, or of ranks not asked
        for, were never fetched: the bar does not wait for them)."""
        if self._p and task is not None:
            done = self._p.tasks[[t.id for t in self._p.tasks].index(task)].completed
            self._p.update(task, total=done, completed=done)


def binary_speed_column():
    """rich's transfer speed column in binary units (``1.5 MiB/s``)."""
    from rich import filesize
    from rich.progress import TransferSpeedColumn
    from rich.text import Text

    class BinarySpeedColumn(TransferSpeedColumn):
        def render(self, task) -> Text:
            speed = task.finished_speed or task.speed
            if speed is None:
                return Text("?", style="progress.data.speed")
            unit, suffix = filesize.pick_unit_and_suffix(int(speed), ["B", "KiB", "MiB", "GiB", "TiB"], 1024)
            return Text(f"{speed / unit:.1f} {suffix}/s", style="progress.data.speed")

    return BinarySpeedColumn()


def progress_default(progress: bool | None) -> bool:
    if progress is not None:
        return progress
    import sys

    return sys.stderr.isatty()
