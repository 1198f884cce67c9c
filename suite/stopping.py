"""Stopping a run on SIGINT or SIGTERM: fast, keeping what finished, leaving no process behind.

Inside `stop_on_signals()` the main process turns either signal into `Interrupted`, a
KeyboardInterrupt (so an experiment's `except Exception` lets it through), after killing its
multiprocessing children so that no pool waits for a task in flight. What finished is kept by
the run directory's atomic writes and done markers. Pool workers start with `die_with_parent`:
they ignore both signals (a Ctrl-C reaches the whole process group, and their parent decides)
and the kernel kills them when their parent dies (Linux PR_SET_PDEATHSIG), so even a SIGKILLed
main process leaves none behind; the resource tracker then exits on its own.

Exit codes: 128 + the signal number (130 for SIGINT, 143 for SIGTERM).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal; `exit_code` is 128 + its number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def exit_now(code: int) -> None:
    """Leave at once when `code` says a signal stopped the command: what it wrote is whole, its
    children are gone, and the interpreter's teardown (seconds with torch loaded) would outlast
    a parent's grace period (nox sends SIGKILL after its own)."""
    if code in (128 + s for s in SIGNALS):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def exit_code(e: KeyboardInterrupt) -> int:
    """130 for a plain KeyboardInterrupt (SIGINT outside stop_on_signals), else 128 + signal."""
    return e.exit_code if isinstance(e, Interrupted) else 128 + signal.SIGINT


def _on_signal(signum: int, frame: object) -> None:
    # the first signal stops the run; later ones (nox sends SIGTERM after its SIGINT) must not
    # break the cleanup that the first started
    for s in SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    for child in multiprocessing.active_children():
        child.kill()
    raise Interrupted(signum)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise Interrupted in the main thread; the old handlers come back after.
    Only the main thread sets handlers: elsewhere (a test's thread) the block runs as is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, _on_signal) for s in SIGNALS}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


@contextmanager
def held() -> Iterator[None]:
    """SIGINT and SIGTERM arriving inside the block take effect after it (for a few renames that
    must not be split). Only the main thread sets handlers: elsewhere the block runs as is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    old = {s: signal.signal(s, lambda signum, frame: got.append(signum)) for s in SIGNALS}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        if got:
            os.kill(os.getpid(), got[0])  # now, to the handler that was there


def die_with_parent(parent: int) -> None:
    """Pool initializer (initargs=(os.getpid(),)): ignore SIGINT/SIGTERM and die with `parent`."""
    for s in SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)
