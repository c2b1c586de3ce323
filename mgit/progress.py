"""Rich progress bars with throughput, silent with -q or when stderr is not a terminal."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich is imported when a bar is first shown
    from rich.progress import Progress, TaskID


class Bar:
    """A byte counter; a no-op when progress is hidden."""

    def __init__(self, progress: Progress | None = None, task: TaskID | None = None):
        self._progress, self._task = progress, task

    def advance(self, nbytes: int) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task, nbytes)


QUIET = False  # set by the CLI's -q


@contextmanager
def byte_progress(description: str, total: int) -> Iterator[Bar]:
    if QUIET or not sys.stderr.isatty() or total <= 0:
        yield Bar()
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(binary_units=True),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        yield Bar(progress, progress.add_task(description, total=total))
