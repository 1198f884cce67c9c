"""Read a user's dataset manifest: CSV, JSONL or Parquet with height, width, frames per sample.

Every error raises ManifestError naming the file and, where there is one, the line (1-based, as
an editor shows it; the CSV header is line 1) and what is wrong. `frames` may be missing: then
every row is an image, and a note says so (a video manifest that lost its column is not silently
read as images).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from suite.data.geometry import check_shape, tokens_array

REQUIRED = ("height", "width")
FORMATS = (".csv", ".jsonl", ".json", ".parquet", ".pq")


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
        df = pd.read_csv(path, dtype=str, keep_default_na=False, skip_blank_lines=False)
        lines = [i + 2 for i in range(len(df))]  # header is line 1
        keep = [i for i in range(len(df)) if any(str(v).strip() for v in df.iloc[i])]
        return df.iloc[keep].reset_index(drop=True), [lines[i] for i in keep]
    if suffix in (".jsonl", ".json"):
        return _read_jsonl(path)
    if suffix in (".parquet", ".pq"):
        df = pd.read_parquet(path)
        return df, [i + 1 for i in range(len(df))]  # Parquet has no lines: row number, 1-based
    raise ManifestError(
        f"{path}: unknown manifest format {suffix!r}; accepted: {', '.join(FORMATS)}"
    )


def _as_int(path: Path, line: int, col: str, v) -> int:
    try:
        f = float(v)
    except (TypeError, ValueError):
        f = float("nan")
    if not f == f or f != int(f):
        raise ManifestError(f"{path}:{line}: column {col!r} must be an integer, got {v!r}")
    return int(f)


def _print_note(text: str) -> None:
    print(f"note: {text}", file=sys.stderr)


def read_manifest(path: str | Path, note: Callable[[str], None] = _print_note) -> pd.DataFrame:
    """Columns height, width, frames, tokens (plus any others the file has), one row per sample.
    `note` receives what was assumed (a missing `frames` column read as images)."""
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
    return df.reset_index(drop=True)
