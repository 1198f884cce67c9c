"""Bad inputs of `reproduce` and `report`: each is one line on stderr, exit status 2, no traceback,
and no report file is built. A table of cases (argv, setup, expected code, expected substring), the
shape of tests/test_cli_errors.py; {tmp}, {run} and {file} in argv are filled in per case.

The run directories are synthetic: tables written as `reproduce` writes them (RunDir.write_table,
a done marker with rows and schema), so every check that reads them runs before any experiment."""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from suite.__main__ import main
from suite.rundir import RunDir, schema

SWEEP = pd.DataFrame(
    {
        "B": [1 + i % 4 for i in range(70)],
        "S": [256 * (1 + i) for i in range(70)],
        "step_s": [0.01 * (1 + i) ** 1.5 for i in range(70)],
        "shape": [f'{i}x480x832, "wide"' for i in range(70)],  # quoted: commas and quotes
    }
)
FIT = pd.DataFrame({"term": ["alpha", "beta", "gamma"], "value": [1.5e-5, 2.0e-9, 0.003]})


def cpu_run(tmp: Path, profile: str = "cpu", seed: int = 0) -> Path:
    """A run directory whose shapes and costmodel experiments are done."""
    run = RunDir(tmp / "run")
    written = {"shapes": {"shapes_sweep": SWEEP}, "costmodel": {"costmodel_fit": FIT}}
    for name, tables in written.items():
        for table, df in tables.items():
            run.write_table(table, df)
        run.mark_done(
            name,
            {
                "experiment": name,
                "profile": profile,
                "seed": seed,
                "tables": {t: len(df) for t, df in tables.items()},
                "schema": {t: schema(df) for t, df in tables.items()},
            },
        )
    return run.root


def cut(table: str, keep: Callable[[bytes], bytes]) -> Callable[[Path], Path]:
    """Setup: a CPU run whose `table` file keeps keep(its bytes)."""

    def setup(tmp: Path) -> Path:
        root = cpu_run(tmp)
        path = RunDir(root).table_path(table)
        path.write_bytes(keep(path.read_bytes()))
        return root

    return setup


def gz_run(tmp: Path) -> Path:
    """A CPU run whose sweep is stored gzipped, the stream cut short."""
    root = cpu_run(tmp)
    plain = root / "results" / "shapes_sweep.csv"
    data = gzip.compress(plain.read_bytes(), mtime=0)
    plain.unlink()
    (root / "results" / "shapes_sweep.csv.gz").write_bytes(data[: len(data) // 2])
    return root


def a_file(tmp: Path) -> Path:
    (tmp / "file").write_text("not a folder\n")
    return tmp / "run"


def read_only(tmp: Path) -> Path:
    root = cpu_run(tmp)
    root.chmod(0o555)
    return root


def lines(n: int) -> Callable[[bytes], bytes]:
    return lambda data: b"".join(data.splitlines(keepends=True)[:n])


def mid_row(data: bytes) -> bytes:
    return data[: data.rindex(b"\n", 0, -1) + 8]  # the last row cut after a few characters


def mid_quote(data: bytes) -> bytes:
    return data[: data.rindex(b'"wide') + 3]


CASES = [
    # (id, argv, setup, expected code, expected substring)
    ("out-is-a-file", ["reproduce", "--out", "{file}"], a_file, 2, "not a directory"),
    ("out-under-a-file", ["reproduce", "--out", "{file}/x"], a_file, 2, "cannot create it"),
    ("out-unwritable", ["reproduce", "--out", "/sys/suite-run"], cpu_run, 2, "cannot create"),
    ("report-a-file", ["report", "{file}"], a_file, 2, "not a directory"),
    ("report-missing", ["report", "{tmp}/nowhere"], cpu_run, 2, "no such directory"),
    ("report-not-a-run", ["report", "{tmp}"], cpu_run, 2, "no results/ folder"),
    ("report-read-only", ["report", "{run}"], read_only, 2, "not writable"),
    (
        "fit-cut-mid-row",
        ["report", "{run}"],
        cut("costmodel_fit", mid_row),
        2,
        "costmodel_fit.csv, line 4: the last row is cut short",
    ),
    (
        "sweep-cut-at-line-41",
        ["report", "{run}"],
        cut("shapes_sweep", lines(40)),
        2,
        "shapes_sweep.csv: 39 rows, its done marker records 70",
    ),
    (
        "sweep-cut-mid-quote",
        ["report", "{run}"],
        cut("shapes_sweep", mid_quote),
        2,
        "shapes_sweep.csv, line 71",
    ),
    (
        "sweep-row-short",
        ["report", "{run}"],
        cut("shapes_sweep", lambda d: d.replace(b"\n3,", b"\n3\n", 1)),
        2,
        "fields, the header has 4",
    ),
    (
        "fit-value-not-a-number",
        ["report", "{run}"],
        cut("costmodel_fit", lambda d: d.replace(b"0.003", b"0.0O3")),
        2,
        "costmodel_fit.csv, line 4: column 'value' should hold numbers",
    ),
    ("sweep-gz-cut", ["report", "{run}"], gz_run, 2, "shapes_sweep.csv.gz: not a whole table"),
    (
        "reproduce-reads-a-cut-table",
        ["reproduce", "--out", "{run}", "--only", "shapes"],
        cut("shapes_sweep", lines(40)),
        2,
        "shapes_sweep.csv: 39 rows",
    ),
    (
        "resume-another-profile",
        ["reproduce", "--out", "{run}", "--profile", "quick"],
        cpu_run,
        2,
        "was started with --profile cpu (results/costmodel.done.json)",
    ),
    (
        "resume-another-seed",
        ["reproduce", "--out", "{run}", "--seed", "3"],
        cpu_run,
        2,
        "was started with --seed 0",
    ),
    (
        "budget-on-cpu",
        ["reproduce", "--out", "{run}", "--profile", "cpu", "--budget", "60"],
        cpu_run,
        2,
        "--budget: no selected experiment has a time estimate for the cpu profile",
    ),
    ("only-unknown-claim", ["reproduce", "--out", "{run}", "--only", "C99"], cpu_run, 2, "C99"),
    (
        "budget-not-positive",
        ["reproduce", "--out", "{run}", "--budget", "0"],
        cpu_run,
        2,
        "--budget must be a positive number of seconds, got 0",
    ),
]


@pytest.mark.parametrize(
    ("argv", "setup", "code", "expect"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, argv, setup, code, expect):
    if setup is read_only and os.geteuid() == 0:
        pytest.skip("root writes into a read-only folder")
    run = setup(tmp_path)
    fill = {"tmp": str(tmp_path), "run": str(run), "file": str(tmp_path / "file")}
    try:
        got = main([a.format(**fill) for a in argv])
    except SystemExit as e:  # argparse
        got = e.code
    err = capsys.readouterr().err
    assert got == code, err
    assert expect in err
    assert "Traceback" not in err
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].count("\n") == 0
    built = {"metrics.csv", "claims.json", "figures", "report.html", "report.pdf", ".report.new"}
    assert not [p for p in tmp_path.rglob("*") if p.name in built | {".lock"}]
