"""Progress display for a run: rich bars in a terminal, plain timestamp-free lines elsewhere.

An experiment sees it as `ctx.progress` (possibly None) and uses only three calls:

    ctx.log("fitted p = 1.93")                      # one line of narrative
    with ctx.progress.task("shape sweep", total=len(grid)) as t:
        for shape in grid:
            ...
            t.advance()

or, when `ctx.progress` may be None, the null-safe helper:

    for shape in track(ctx.progress, grid, "shape sweep"):
        ...
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TextIO, TypeVar

T = TypeVar("T")


class Task:
    """One progress bar (a sub-step of an experiment)."""

    def __init__(self, owner: Progress, description: str, total: int | None) -> None:
        self._owner = owner
        self.description = description
        self.total = total
        self.completed = 0
        self._id = owner._add(description, total)

    def advance(self, n: int = 1) -> None:
        self.completed += n
        self._owner._advance(self, n)

    def __enter__(self) -> Task:
        return self

    def __exit__(self, *exc: object) -> None:
        self._owner._finish(self)


class Progress:
    """Rich progress bars when `stream` is a terminal, else one plain line per event.

    `plain_every` controls how often (in percent of the total) plain mode prints a task's progress.
    """

    def __init__(
        self, stream: TextIO | None = None, force_plain: bool = False, plain_every: int = 25
    ) -> None:
        self.stream = stream or sys.stderr
        self.plain_every = plain_every
        self.prefix = ""
        self._rich = None
        self._last_pct: dict[int, int] = {}
        self._next_id = 0
        if not force_plain and getattr(self.stream, "isatty", lambda: False)():
            try:
                from rich.console import Console
                from rich.progress import (
                    BarColumn,
                    MofNCompleteColumn,
                    SpinnerColumn,
                    TextColumn,
                    TimeElapsedColumn,
                )
                from rich.progress import Progress as RichProgress

                console = Console(file=self.stream)
                self._rich = RichProgress(
                    SpinnerColumn(),
                    TextColumn("{task.description}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    console=console,
                    transient=True,
                )
                self._rich.start()
            except Exception:  # rich missing or broken: plain lines still work
                self._rich = None

    @property
    def is_rich(self) -> bool:
        return self._rich is not None

    # -- the public surface
    def log(self, msg: str) -> None:
        text = f"{self.prefix}{msg}"
        if self._rich is not None:
            self._rich.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self.stream, flush=True)

    def task(self, description: str, total: int | None = None) -> Task:
        return Task(self, description, total)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Prefix log lines with `[name] ` while an experiment runs."""
        old, self.prefix = self.prefix, f"[{name}] "
        try:
            yield
        finally:
            self.prefix = old

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()
            self._rich = None

    # -- internals used by Task
    def _add(self, description: str, total: int | None) -> int:
        if self._rich is not None:
            return self._rich.add_task(f"{self.prefix}{description}", total=total)
        self.log(f"{description} ..." if total is None else f"{description} (0/{total})")
        self._next_id += 1
        return self._next_id

    def _advance(self, task: Task, n: int) -> None:
        if self._rich is not None:
            self._rich.advance(task._id, n)
            return
        if not task.total:
            return
        pct = int(100 * task.completed / task.total)
        step = pct // max(1, self.plain_every)
        if step > self._last_pct.get(task._id, 0) and task.completed < task.total:
            self._last_pct[task._id] = step
            self.log(f"{task.description} ({task.completed}/{task.total})")

    def _finish(self, task: Task) -> None:
        if self._rich is not None:
            self._rich.remove_task(task._id)
        else:
            done = f"{task.completed}/{task.total}" if task.total else f"{task.completed}"
            self.log(f"{task.description} done ({done})")
        self._last_pct.pop(task._id, None)


def track(
    progress: Progress | None, items: Iterable[T], description: str, total: int | None = None
) -> Iterator[T]:
    """Iterate `items`, advancing a bar on `progress`; silent when `progress` is None."""
    if progress is None:
        yield from items
        return
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with progress.task(description, total) as t:
        for item in items:
            yield item
            t.advance()
