"""The run directory: atomic writes never leave a partial file; done markers; tables roundtrip."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from suite import rundir
from suite.rundir import RunContext, RunDir, atomic_write_bytes, atomic_write_text, write_json


def test_atomic_write_creates_parents_and_replaces(tmp_path):
    path = tmp_path / "a" / "b" / "x.txt"
    atomic_write_text(path, "one")
    atomic_write_text(path, "two")
    assert path.read_text() == "two"
    assert sorted(p.name for p in path.parent.iterdir()) == ["x.txt"]


def test_failed_write_leaves_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "t.csv"
    atomic_write_text(path, "old,complete\n")

    def boom(fd):
        raise OSError("disk full")

    monkeypatch.setattr(rundir.os, "fsync", boom)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_bytes(path, b"new,half")
    assert path.read_text() == "old,complete\n"
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"]


def test_interrupt_during_write_leaves_no_file(tmp_path, monkeypatch):
    path = tmp_path / "new.csv"

    def interrupt(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(rundir.os, "replace", interrupt)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(path, "a,b\n1,2\n")
    assert list(tmp_path.iterdir()) == []


def test_killed_writer_never_exposes_half_a_table(tmp_path):
    """A child process killed mid-write (before rename) leaves the target absent, not truncated."""
    path = tmp_path / "big.csv"
    pid = os.fork()
    if pid == 0:  # child: stop forever inside the write, after the data but before the rename
        rundir.os.replace = lambda *a: os.kill(os.getpid(), 9)
        atomic_write_bytes(path, b"x" * 1_000_000)
        os._exit(0)
    os.waitpid(pid, 0)
    assert not path.exists()
    leftovers = list(tmp_path.iterdir())
    assert all(p.name.startswith(".big.csv.") and p.suffix == ".tmp" for p in leftovers)


def test_write_json_is_sorted(tmp_path):
    write_json(tmp_path / "x.json", {"b": 1, "a": [1, 2], "p": tmp_path})
    text = (tmp_path / "x.json").read_text()
    assert text.index('"a"') < text.index('"b"') and text.endswith("\n")


def test_tables_roundtrip(tmp_path):
    run = RunDir(tmp_path / "run")
    df = pd.DataFrame(
        {
            "B": [1, 2, 3],
            "S": [1560, 3120, 75600],
            "step_s": [0.1, 0.25, np.nan],
            "impl": ["fused", "eager", "wan-eager"],
        }
    )
    path = run.write_table("shapes_sweep", df)
    assert path == run.results / "shapes_sweep.csv"
    back = run.read_table("shapes_sweep")
    pd.testing.assert_frame_equal(back, df)
    run.write_table("a_first", df.head(1))
    assert list(run.tables()) == ["a_first", "shapes_sweep"]
    assert path.read_bytes().count(b"\r") == 0


def test_tables_read_back_bit_exact_floats(tmp_path):
    """Every float comes back with all its bits, from both readers (the default parser of the
    H200 image's pandas, and of pandas 2.3, was off in the last digit of costmodel_fit.csv)."""
    values = np.random.default_rng(0).lognormal(-4, 3, 2000)
    values[0] = 0.01349740586155797  # read there as 0.0134974058615579
    run = RunDir(tmp_path / "run")
    run.write_table("floats", pd.DataFrame({"v": values}))
    for back in (run.read_table("floats")["v"], run.tables()["floats"]["v"]):
        assert back.to_numpy().tobytes() == values.tobytes()


def test_tables_of_missing_run_is_empty(tmp_path):
    assert RunDir(tmp_path / "none").tables() == {}
    assert RunDir(tmp_path / "none").status() == {}


def test_done_markers(tmp_path):
    run = RunDir(tmp_path)
    assert not run.is_done("balance")
    run.mark_done("balance", {"seconds": 1.5, "tables": {"balance_steps": 10}})
    assert run.is_done("balance")
    assert run.status() == {"balance": {"seconds": 1.5, "tables": {"balance_steps": 10}}}
    run.clear("balance")
    assert not run.is_done("balance")
    run.clear("balance")  # clearing twice is fine


def test_done_marker_is_not_a_table(tmp_path):
    run = RunDir(tmp_path)
    run.write_table("x_t", pd.DataFrame({"a": [1]}))
    run.mark_done("x", {})
    assert list(run.tables()) == ["x_t"]


def test_context_log_goes_to_progress(tmp_path):
    seen = []

    class P:
        def log(self, msg):
            seen.append(msg)

    RunContext(RunDir(tmp_path), "cpu", "cpu").log("silent")  # no progress: no error
    RunContext(RunDir(tmp_path), "cpu", "cpu", progress=P()).log("hello")
    assert seen == ["hello"]


def test_large_tables_are_gzipped_deterministically_and_read_back(tmp_path, monkeypatch):
    import suite.rundir as rd

    monkeypatch.setattr(rd, "GZIP_CELLS", 10)
    run = rd.RunDir(tmp_path)
    big = pd.DataFrame({"a": range(20), "b": range(20)})
    path = run.write_table("big", big)
    assert path.name == "big.csv.gz" and not (tmp_path / "results" / "big.csv").exists()
    first = path.read_bytes()
    run.write_table("big", big)
    assert path.read_bytes() == first  # no timestamp in the gzip header
    assert run.tables()["big"].equals(big) and run.read_table("big").equals(big)
    run.write_table("big", big.head(2))  # small again: plain CSV replaces the .gz
    assert run.table_path("big").name == "big.csv" and not path.exists()


def test_a_table_with_no_rows_or_columns_reads_back_empty(tmp_path):
    # e2e writes its profiler table empty when no shape is profiled (the quick profile): the
    # report must read it as an empty frame, not fail on it (H200 quick run at da4829c did)
    run = RunDir(tmp_path)
    run.write_table("e2e_profile", pd.DataFrame())
    assert run.read_table("e2e_profile").empty
    assert run.tables()["e2e_profile"].empty


def test_a_table_cut_inside_a_quoted_field_names_the_file(tmp_path):
    """A cut that ends on a line end inside a quoted field passes the line-end check; pandas'
    ParserError becomes a one-line TableError naming the file."""
    path = tmp_path / "t.csv"
    path.write_text('a,b\n1,"two\nlines"\n3,"open\n')
    with pytest.raises(rundir.TableError, match=r"t\.csv: cannot be read as a table \(.*EOF"):
        rundir.read_checked(path)


def test_tables_are_checked_against_their_done_marker(tmp_path):
    run = RunDir(tmp_path)
    df = pd.DataFrame({"B": [1, 2, 3], "t": [0.1, 0.2, 0.3], "name": ["a", "b", "c"]})
    run.write_table("x_sweep", df)
    run.mark_done("x", {"tables": {"x_sweep": 3}, "schema": {"x_sweep": rundir.schema(df)}})
    assert rundir.schema(df) == {"B": "number", "t": "number", "name": "text"}
    pd.testing.assert_frame_equal(run.read_table("x_sweep"), df)
    path = run.table_path("x_sweep")
    path.write_text(path.read_text().replace("0.2", "0.2x"))
    with pytest.raises(rundir.TableError, match=r"line 3: column 't' should hold numbers"):
        run.tables()
    run.write_table("x_sweep", df.head(2))
    with pytest.raises(rundir.TableError, match="2 rows, its done marker records 3"):
        run.read_table("x_sweep")
