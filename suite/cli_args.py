"""Argument checks the command-line tools share: each names the argument and what it accepts.

The `whole`, `real` and `int_list` factories are argparse types (argparse turns their error into
its one-line usage error, exit 2); `check_writable` runs before a command's work, so a path that
cannot take the output stops it before anything is computed, not after.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path


def whole(lo: int = 1, hi: int | None = None):
    """A whole number in [lo, hi]."""
    span = f"from {lo} to {hi}" if hi is not None else f">= {lo}"

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            v = None
        if v is None or v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"must be a whole number {span}, got {text!r}")
        return v

    return parse


def real(lo: float | None = None, hi: float | None = None, open_lo: bool = False):
    """A finite number in [lo, hi] ((lo, hi] with open_lo)."""
    parts = [f"> {lo}" if open_lo else f">= {lo}"] if lo is not None else []
    parts += [f"<= {hi}"] if hi is not None else []
    span = " and ".join(["finite", *parts])

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            v = math.nan
        bad = not math.isfinite(v) or (lo is not None and (v <= lo if open_lo else v < lo))
        if bad or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"must be a {span} number, got {text!r}")
        return v

    return parse


def int_list(lo: int = 1):
    """Comma-separated whole numbers >= lo, at least one."""

    def parse(text: str) -> list[int]:
        try:
            vals = [int(s) for s in text.split(",") if s.strip()]
        except ValueError:
            vals = []
        if not vals or min(vals) < lo:
            raise argparse.ArgumentTypeError(
                f"must be comma-separated whole numbers >= {lo} (e.g. 256,512), got {text!r}"
            )
        return vals

    return parse


def check_writable(
    path: str | os.PathLike, arg: str, suffixes: tuple[str, ...] = (), folder: bool = False
) -> None:
    """Raise ValueError naming `arg` unless a file (a folder, with folder=True) can be written at
    `path` (missing folders are made by the writer): a file path is not a folder and a folder
    path not a file, the nearest existing folder is writable, and the suffix one of `suffixes`
    where given."""
    p = Path(path)
    if suffixes and p.suffix.lower() not in suffixes:
        raise ValueError(f"{arg} {path}: the file must end in {' or '.join(suffixes)}")
    if folder and p.is_dir():
        if not os.access(p, os.W_OK | os.X_OK):
            raise ValueError(f"{arg} {path}: cannot write in it (permission denied)")
        return
    if p.exists() and folder != p.is_dir():
        want = "a folder" if folder else "a file path"
        raise ValueError(f"{arg} {path}: is a {'file' if folder else 'folder'}; give {want}")
    d = p.parent
    while not d.exists() and d != d.parent:
        d = d.parent
    if not d.is_dir():
        raise ValueError(f"{arg} {path}: {d} is not a folder")
    if not os.access(d, os.W_OK | os.X_OK):
        raise ValueError(f"{arg} {path}: cannot write in {d} (permission denied)")
