"""Read a user's dataset manifest: CSV, JSONL or Parquet with height, width, frames per sample.

The schema is explicit: columns height and width (and frames; other columns are kept), each
value a whole number, at least one row, and in a CSV every row has exactly the header's fields
(a row with one field too many is refused, never shifted under the header). Every error raises
ManifestError naming the file and, where there is one, the line (1-based, as an editor shows it;
the CSV header is line 1) and what is wrong. `frames` may be missing: then every row is an
image, and a note says so (a video manifest that lost its column is not silently read as
images). With `max_tokens` (a memory budget), a sample above it is refused by line: it cannot
be trained in any batch, and a forecast that simulated it would recommend a setup that fails.
Parquet needs pyarrow: `pip install 'adaptiveload-suite[parquet]'`.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from suite.data.geometry import check_shape, tokens_array

REQUIRED = ("height", "width")
FORMATS = (".csv", ".jsonl", ".json", ".parquet", ".pq")
PARQUET_EXTRA = "pip install 'adaptiveload-suite[parquet]'"


class ManifestError(ValueError):
    """A manifest that cannot be used; the message names the file and line."""


def _read_jsonl(path: Path) -> tuple[pd.DataFrame, list[int]]:
    rows, lines = [], []
    for lineno, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise ManifestError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise ManifestError(
                f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}"
            )
        rows.append(obj)
        lines.append(lineno)
    return pd.DataFrame(rows), lines


def _read_csv(path: Path) -> tuple[pd.DataFrame, list[int]]:
    """Every field a string; each row's first line; blank lines skipped; a row whose field count
    is not the header's, or a quote left open, is refused by line."""
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f, strict=True)
        try:
            header = [h.strip() for h in next(reader, [])]
            if not header:
                raise ManifestError(f"{path}: the manifest is empty (no header, no rows)")
            twice = sorted({h for h in header if header.count(h) > 1})
            if twice:
                raise ManifestError(f"{path}:1: column(s) {twice} appear more than once")
            rows, lines, end = [], [], reader.line_num
            for rec in reader:
                start, end = end + 1, reader.line_num
                if not any(v.strip() for v in rec):
                    continue
                if len(rec) != len(header):
                    raise ManifestError(
                        f"{path}:{start}: {len(rec)} fields, the header has {len(header)} "
                        f"({','.join(header)})"
                    )
                rows.append(rec)
                lines.append(start)
        except csv.Error as e:
            raise ManifestError(f"{path}:{reader.line_num}: not valid CSV ({e})") from None
    return pd.DataFrame(rows, columns=header, dtype=str), lines


def _load(path: Path) -> tuple[pd.DataFrame, list[int]]:
    """The table and each row's line; a reader's own error (pandas, pyarrow, a byte that is not
    UTF-8) becomes a ManifestError that names the file."""
    try:
        return _read(path)
    except ManifestError:
        raise
    except pd.errors.EmptyDataError:
        raise ManifestError(f"{path}: the manifest is empty (no header, no rows)") from None
    except (ValueError, OSError) as e:  # ParserError, ArrowInvalid, UnicodeDecodeError
        raise ManifestError(f"{path}: cannot read it as {path.suffix} ({e})") from None


def _read(path: Path) -> tuple[pd.DataFrame, list[int]]:
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return _read_csv(path)
    if suffix in (".jsonl", ".json"):
        return _read_jsonl(path)
    if suffix in (".parquet", ".pq"):
        if importlib.util.find_spec("pyarrow") is None:
            raise ManifestError(f"{path}: reading Parquet needs pyarrow: {PARQUET_EXTRA}")
        df = pd.read_parquet(path, engine="pyarrow")
        return df, [i + 1 for i in range(len(df))]  # Parquet has no lines: row number, 1-based
    raise ManifestError(
        f"{path}: unknown manifest format {suffix!r}; accepted: {', '.join(FORMATS)}"
    )


def _as_int(path: Path, line: int, col: str, v) -> int:
    try:
        f = float("nan") if isinstance(v, (bool, np.bool_)) else float(v)
    except (TypeError, ValueError):
        f = float("nan")
    if not f == f or f != int(f):
        raise ManifestError(f"{path}:{line}: column {col!r} must be an integer, got {v!r}")
    return int(f)


def _print_note(text: str) -> None:
    print(f"note: {text}", file=sys.stderr)


def read_manifest(
    path: str | Path,
    note: Callable[[str], None] = _print_note,
    max_tokens: float | None = None,
) -> pd.DataFrame:
    """Columns height, width, frames, tokens (plus any others the file has), one row per sample.
    `note` receives what was assumed (a missing `frames` column read as images); `max_tokens`
    (M_mem, tokens one batch holds) refuses a larger sample by line."""
    path = Path(path)
    if not path.is_file():
        raise ManifestError(f"{path}: no such manifest file")
    df, lines = _load(path)
    if df.empty:
        raise ManifestError(f"{path}: the manifest has no rows (columns: {list(df.columns)})")
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise ManifestError(
            f"{path}: missing column(s) {missing}; a manifest needs height, width and "
            f"(for videos) frames, got columns {list(df.columns)}"
        )
    if "frames" not in df.columns:
        note(f"{path} has no 'frames' column: each of its {len(df)} rows is read as an image")
        df["frames"] = 1
    out = {c: [] for c in ("height", "width", "frames")}
    for i, line in enumerate(lines):
        vals = {c: _as_int(path, line, c, df[c].iat[i]) for c in out}
        try:
            check_shape(vals["height"], vals["width"], vals["frames"])
        except ValueError as e:
            raise ManifestError(f"{path}:{line}: {e}") from None
        for c in out:
            out[c].append(vals[c])
    for c in out:
        df[c] = out[c]
    df["tokens"] = tokens_array(df["height"], df["width"], df["frames"])
    if max_tokens is not None:
        _check_fits(path, df, lines, max_tokens)
    return df.reset_index(drop=True)


def _check_fits(path: Path, df: pd.DataFrame, lines: list[int], max_tokens: float) -> None:
    over = (df["tokens"] > max_tokens).to_numpy().nonzero()[0]
    if len(over):
        r = df.iloc[over[0]]
        raise ManifestError(
            f"{path}:{lines[over[0]]}: a {r.height}x{r.width}x{r.frames} sample is "
            f"{r.tokens:,} tokens, above M_mem = {max_tokens:,.0f}, the most one batch holds "
            f"({len(over)} of {len(df)} rows are): drop or crop them, or use a cost model "
            "with a larger M_mem (fit-cost --capacity-gb)"
        )
