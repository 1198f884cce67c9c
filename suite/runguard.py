"""Guards of a run directory: it is a writable folder, one invocation writes it at a time, and a
resumed run goes on with what it started with.

RUN/.lock is held (fcntl.flock) by the invocation writing the run (`reproduce`, `report`) and
names it (pid, host, start time, command) for the message a second writer gets. The kernel
drops the lock when its holder dies, so a stale lock file is simply taken over. The holder
removes the file when it is done; a writer that locked a file already unlinked tries again.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from suite.rundir import RunDir

LOCK = ".lock"
# what a run's tables depend on, as each done marker (results/<name>.done.json) records it: a
# resumed run reuses those tables only where this invocation asks for the same
RESUME_KEYS = ("profile", "seed")


class UsageError(Exception):
    """A one-line error about the command's arguments or run directory (exit status 2)."""


def writable_dir(path: Path, what: str) -> None:
    """Raise UsageError unless `path` is a writable directory (made, parents too, if absent)."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{what} {path}: not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{what} {path}: cannot create it ({e.strerror})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"{what} {path}: not writable (a run directory is written in place)")


@contextmanager
def lock(root: Path) -> Iterator[None]:
    """Hold `root`'s lock for the block; UsageError naming the holder when another has it."""
    path = Path(root) / LOCK
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as e:
            raise UsageError(f"{path}: cannot create the run's lock file ({e.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = _read(path) or "a process that has not written its name yet"
            raise UsageError(
                f"{root} is being written by another run ({holder}; lock file {path}): wait "
                "for it to finish, or pass another directory"
            ) from None
        try:
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                break  # locked the file that is there, not one its last holder just removed
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        command = " ".join(["python", "-m", "suite", *sys.argv[1:]])[:300]
        me = f"pid {os.getpid()} on {socket.gethostname()}, started {stamp}: {command}"
        os.ftruncate(fd, 0)
        os.write(fd, me.encode("utf-8", "replace") + b"\n")
        yield
    finally:
        path.unlink(missing_ok=True)  # still held: no writer can lock this file meanwhile
        os.close(fd)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def started_with(run: RunDir, redo: frozenset[str] = frozenset()) -> dict[str, tuple[str, str]]:
    """{key: (value, where it is recorded)} for RESUME_KEYS, from the done markers of the
    experiments not in `redo` (and env.json's profile unless something is redone: --force
    rewrites it); empty for a new run directory."""
    seen: dict[str, tuple[str, str]] = {}
    for name, info in sorted(run.status().items()):
        if name in redo:
            continue
        for key in RESUME_KEYS:
            if key in info:
                seen.setdefault(key, (str(info[key]), f"results/{name}.done.json"))
    try:
        profile = json.loads((run.root / "env.json").read_text(encoding="utf-8")).get("profile")
    except (OSError, ValueError, AttributeError):
        profile = None
    if profile and not redo:
        seen.setdefault("profile", (str(profile), "env.json"))
    return seen


def resume_conflict(
    run: RunDir, asked: dict[str, object], redo: frozenset[str] = frozenset()
) -> str | None:
    """Why this invocation cannot resume `run` with `asked` ({key: value}) while redoing the
    experiments in `redo` (--force), or None."""
    for key, (value, where) in started_with(run, redo).items():
        if key in asked and str(asked[key]) != value:
            return (
                f"{run.root} was started with --{key} {value} ({where}), this invocation asks "
                f"for --{key} {asked[key]}: resume it with --{key} {value}, pass --force (without --only) to redo "
                "every experiment, or pass another --out"
            )
    return None


def other_gpu(run: RunDir, have_cuda: bool) -> str | None:
    """Why `run` cannot resume here, or None: its env.json names another GPU model than this
    machine's (one run's tables, and the intervals that read its GPU, come from one model)."""
    from suite.env import gpu_model

    path = run.root / "env.json"
    try:
        started = gpu_model(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None  # unreadable: the report says env.json is missing or broken
    if not have_cuda:
        return None  # a CPU invocation runs no GPU experiment: the run's GPU tables stay whole
    import torch

    here = torch.cuda.get_device_name(0)
    if started is None or started == here:
        return None
    return (
        f"{path} says this run started on {started}, and this machine has {here}: a run's "
        "measurements come from one GPU model. Resume it on that model, or start a new run "
        "directory (--out), or pass --force to redo every experiment here."
    )
