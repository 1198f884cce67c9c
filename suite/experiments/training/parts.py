"""The training experiment across several invocations (`reproduce --budget S`, e.g. the full
profile in <= 10-minute device calls): each finished piece of work (an emulated run, the C14
probes, the C15 loss runs) is kept in results/training_parts/<key>.csv + .json (seconds and
commit) and reused by the next invocation; a piece that would end past this invocation's deadline
is deferred, the pieces after it that still fit are run (first fit), and the experiment then
stops with `TrainingIncomplete` naming what is left. Removed when the experiment completes."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from suite.rundir import WorkDeferred, read_csv


class TrainingIncomplete(WorkDeferred):
    """Raised at the end of an invocation (`reproduce --budget`) that deferred work past its
    deadline; the finished work is kept in results/training_parts/, a rerun with the same --out
    resumes."""

    # its public home, the experiment that raises it: tracebacks (results/training.error.txt,
    # whose last line is the report's "failed:" reason) name it
    # suite.experiments.training.TrainingIncomplete
    __module__ = "suite.experiments.training"


class Parts:
    """Finished work of earlier invocations, keyed by profile, ranks, seed, steps and name."""

    def __init__(self, ctx, prof):
        import time

        self.dir = ctx.run.results / "training_parts"
        self.tag = f"{prof['name']}-r{prof['ranks']}-seed{ctx.seed}"
        self.deadline = ctx.options.get("deadline")
        self.seconds = 0.0  # run time of the work resumed from earlier invocations
        self.commits = ctx.part_commits  # and the commits it ran at
        self.deferred: list[tuple[str, float]] = []  # (what, seconds needed) left for the next
        self._time = time.time

    def _path(self, name: str, steps: int, ext: str):
        return self.dir / f"{self.tag}-s{steps}-{name.replace('/', '_')}.{ext}"

    def has(self, name: str, steps: int) -> bool:
        return self._path(name, steps, "csv").exists() and self._path(name, steps, "json").exists()

    def _meta(self, name: str, steps: int) -> dict:
        import json

        return json.loads(self._path(name, steps, "json").read_text())

    def seconds_of(self, name: str, steps: int) -> float:
        """The run time of a finished piece (0 if not finished)."""
        return float(self._meta(name, steps)["seconds"]) if self.has(name, steps) else 0.0

    def load(self, name: str, steps: int) -> pd.DataFrame | None:
        """A finished piece's table, its commit added to ctx.part_commits; None if not finished."""
        if not self.has(name, steps):
            return None
        meta = self._meta(name, steps)
        self.seconds += float(meta["seconds"])
        self.commits.add(str(meta.get("commit", "unknown")))
        return read_csv(self._path(name, steps, "csv"))

    def save(self, name: str, steps: int, rows: pd.DataFrame, seconds: float) -> None:
        from suite.env import commit_label
        from suite.rundir import atomic_write_text, write_json

        if self.deadline is None:
            return  # one invocation: nothing to resume
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(
            self._path(name, steps, "csv"), rows.to_csv(index=False, lineterminator="\n")
        )
        write_json(self._path(name, steps, "json"), {"seconds": seconds, "commit": commit_label()})

    def fits(self, what: str, need_s: float) -> bool:
        """Whether `what` (~need_s seconds) ends before the deadline; if not, it is deferred."""
        if self.deadline is None or self._time() + need_s <= self.deadline:
            return True
        self.deferred.append((what, need_s))
        return False

    def table(self, name: str, steps: int, need_s: float, make: Callable[[], pd.DataFrame | None]):
        """A piece that makes one table: resumed, else made (and kept) if it fits, else None
        (deferred)."""
        import time

        done = self.load(name, steps)
        if done is not None or not self.fits(name, need_s):
            return done
        t0 = time.perf_counter()
        out = make()
        if out is not None:
            self.save(name, steps, out, time.perf_counter() - t0)
        return out

    def raise_if_deferred(self) -> None:
        if not self.deferred:
            return
        left = self.deadline - self._time() if self.deadline is not None else 0.0
        what = "; ".join(f"{w} needs ~{s:.0f} s" for w, s in self.deferred)
        raise TrainingIncomplete(
            f"training: {len(self.deferred)} piece(s) did not fit this invocation ({what}; "
            f"{left:.0f} s left, --budget); finished work is kept in {self.dir}; rerun the same "
            "command (same --out) to continue"
        )

    def clear(self) -> None:
        import shutil

        shutil.rmtree(self.dir, ignore_errors=True)
