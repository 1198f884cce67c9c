"""The run directory: where every experiment writes its raw tables, atomically.

Layout (see docs/ARCHITECTURE in the README):
    RUN/env.json  RUN/results/<table>.csv  RUN/results/<experiment>.done.json
    RUN/claims.json  RUN/figures/  RUN/report.html  RUN/report.pdf
A table is written to a temporary file and renamed, so a killed run never leaves half a table,
and an experiment is finished only when its `.done.json` marker exists (written last). The
marker records each table's rows and schema (column -> number | bool | text): a table is checked
against it when read, and one cut short or malformed is a TableError naming the file and line.
"""

from __future__ import annotations

import csv
import functools
import gzip
import io
import json
import os
import tempfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


@functools.cache
def _exact_float_option() -> dict:
    """{} where pandas' default parser reads floats exactly (pandas 3.1 here, which deprecates
    the option), else round_trip: the H200 image's pandas read the committed costmodel_fit.csv
    one digit off. Probed, since pandas 2.3 and the image's 3.x both read inexactly."""
    values = np.random.default_rng(0).lognormal(-4, 3, 256)
    text = "v\n" + "\n".join(repr(float(v)) for v in values) + "\n"
    exact = (pd.read_csv(io.StringIO(text))["v"].to_numpy() == values).all()
    return {} if exact else {"float_precision": "round_trip"}


class TableError(ValueError):
    """A table file that is cut short or malformed; the message (one line) names file and line."""


def read_csv(path, **kwargs) -> pd.DataFrame:
    """pd.read_csv that gives back exactly the floats write_table wrote, on any pandas. A table
    written with no columns (an experiment part that produced no rows) reads as an empty frame.
    A file pandas cannot parse (a quote left open, a gzip stream cut short) is a TableError."""
    return _parse(path, path, **kwargs)


def _parse(source, path, **kwargs) -> pd.DataFrame:
    """read_csv of `source` (a path, or the text of `path`), errors naming `path`."""
    try:
        return pd.read_csv(source, **_exact_float_option(), **kwargs)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()
    except (pd.errors.ParserError, EOFError, OSError, zlib.error, UnicodeDecodeError) as e:
        if isinstance(e, FileNotFoundError | PermissionError | IsADirectoryError):
            raise
        detail = " ".join(str(e).split()) or type(e).__name__
        raise TableError(f"{path}: cannot be read as a table ({detail})") from None


# how a column's values are checked when read back (from its pandas dtype kind when written)
KINDS = {"f": "number", "i": "number", "u": "number", "b": "bool"}
READS_AS = {"number": "fiu", "bool": "b", "text": None}  # dtype kinds accepted on reading


def schema(df: pd.DataFrame) -> dict[str, str]:
    """column -> number | bool | text: what a done marker records of each table."""
    return {str(c): KINDS.get(df[c].dtype.kind, "text") for c in df.columns}


def _text(path: Path) -> str:
    data = path.read_bytes()
    try:
        if path.name.endswith(".gz"):
            data = gzip.decompress(data)
        return data.decode("utf-8")
    except (EOFError, OSError, zlib.error, UnicodeDecodeError) as e:
        detail = " ".join(str(e).split()) or type(e).__name__
        raise TableError(
            f"{path}: not a whole table file ({detail}); rerun its experiment"
        ) from None


def read_checked(path: Path, rows: int | None = None, columns: dict | None = None) -> pd.DataFrame:
    """Read a table write_table wrote, checking it: every line ends, every row has the header's
    fields, and (where its done marker records them) the row count and column kinds match."""
    path = Path(path)
    text = _text(path)
    if not text.strip():
        return pd.DataFrame()
    where = f"{path}, line {text.count(chr(10)) + 1}"
    if not text.endswith("\n"):
        raise TableError(f"{where}: the last row is cut short (no line end); rerun its experiment")
    reader = csv.reader(io.StringIO(text))
    header = next(reader)
    for record in reader:
        if len(record) != len(header) and not (record == [] and len(header) == 1):
            raise TableError(
                f"{path}, line {reader.line_num}: {len(record)} fields, the header has "
                f"{len(header)}; rerun its experiment"
            )
    df = _parse(io.StringIO(text), path)
    if rows is not None and len(df) != rows:
        raise TableError(
            f"{path}: {len(df)} rows, its done marker records {rows}; rerun its experiment"
        )
    for col, kind in (columns or {}).items():
        accepted = READS_AS.get(kind)
        if col not in df.columns:
            raise TableError(f"{path}: no column {col!r}, which its done marker records")
        if accepted and len(df) and df[col].dtype.kind not in accepted:
            bad = pd.to_numeric(df[col], errors="coerce").isna() & df[col].notna()
            line = 2 + int(bad.to_numpy().argmax()) if kind == "number" and bad.any() else None
            at = f", line {line}" if line else ""
            raise TableError(
                f"{path}{at}: column {col!r} should hold {kind}s, it reads as "
                f"{df[col].dtype}; rerun its experiment"
            )
    return df


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp creates 0600; give the file the permissions a plain open() would
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


GZIP_CELLS = 100_000  # tables larger than this (rows x columns) are stored as .csv.gz


@dataclass
class RunDir:
    """A run directory on disk. Tables are tidy long-format CSVs under results/."""

    root: Path

    def __post_init__(self) -> None:
        self.root = Path(self.root)

    @property
    def results(self) -> Path:
        return self.root / "results"

    @property
    def figures(self) -> Path:
        return self.root / "figures"

    def table_path(self, name: str) -> Path:
        """results/<name>.csv, or results/<name>.csv.gz where the table was stored compressed."""
        gz = self.results / f"{name}.csv.gz"
        return gz if gz.exists() else self.results / f"{name}.csv"

    def write_table(self, name: str, df: pd.DataFrame) -> Path:
        """Write a table atomically; one over GZIP_CELLS cells is gzipped (mtime 0: same bytes
        for the same table), so per-rank raw samples stay small enough to commit."""
        text = df.to_csv(index=False, lineterminator="\n").encode("utf-8")
        plain, gz = self.results / f"{name}.csv", self.results / f"{name}.csv.gz"
        path, other = (gz, plain) if df.size > GZIP_CELLS else (plain, gz)
        atomic_write_bytes(path, gzip.compress(text, mtime=0) if path is gz else text)
        other.unlink(missing_ok=True)
        return path

    def read_table(self, name: str) -> pd.DataFrame:
        """A raw table, checked against its done marker (read_checked)."""
        return read_checked(self.table_path(name), *self._recorded().get(name, (None, None)))

    def tables(self) -> dict[str, pd.DataFrame]:
        """Every raw table of the run, by name, each checked (read_checked)."""
        if not self.results.exists():
            return {}
        paths = list(self.results.glob("*.csv")) + list(self.results.glob("*.csv.gz"))
        named = {p.name.removesuffix(".gz").removesuffix(".csv"): p for p in paths}
        recorded = self._recorded()
        return {n: read_checked(named[n], *recorded.get(n, (None, None))) for n in sorted(named)}

    def _recorded(self) -> dict[str, tuple[int | None, dict | None]]:
        """table -> (rows, schema) as the done markers record them."""
        out = {}
        for info in self.status().values():
            schemas = info.get("schema", {})
            for table, rows in info.get("tables", {}).items():
                out[table] = (int(rows), schemas.get(table))
        return out

    # -- experiment completion markers: an experiment is done only when its marker exists
    def done_path(self, experiment: str) -> Path:
        return self.results / f"{experiment}.done.json"

    def is_done(self, experiment: str) -> bool:
        return self.done_path(experiment).exists()

    def mark_done(self, experiment: str, info: Mapping[str, Any]) -> None:
        write_json(self.done_path(experiment), dict(info))

    def clear(self, experiment: str) -> None:
        self.done_path(experiment).unlink(missing_ok=True)

    def status(self) -> dict[str, dict]:
        out = {}
        for p in sorted(self.results.glob("*.done.json")) if self.results.exists() else []:
            try:
                out[p.name.removesuffix(".done.json")] = json.loads(p.read_text())
            except ValueError as e:
                raise TableError(f"{p}: not a done marker ({e}); rerun its experiment") from None
        return out


class WorkDeferred(RuntimeError):
    """Raised by an experiment that left work for the next invocation (`reproduce --budget`):
    what it finished is kept, a rerun with the same --out continues. Not a failure."""


@dataclass
class RunContext:
    """What an experiment gets: where to write, which profile, and the run's settings."""

    run: RunDir
    profile: str  # "cpu" | "quick" | "full"
    device: str  # "cpu" | "cuda"
    seed: int = 0
    world_size: int = 1  # real ranks when launched under torchrun
    options: dict[str, Any] = field(default_factory=dict)
    progress: Any = None  # a suite.progress.Progress, or None for silence
    # commits of the parts of the current experiment that earlier invocations of a resumed run
    # finished (--budget); recorded in its done.json beside this invocation's commit
    part_commits: set[str] = field(default_factory=set)

    def log(self, msg: str) -> None:
        if self.progress is not None:
            self.progress.log(msg)
