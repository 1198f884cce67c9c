"""One writer per run directory: a second `reproduce` or `report` on a directory another
invocation holds stops at once (exit 2, one line naming the holder); the holder goes on; a lock
whose holder died is taken over."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from suite import runguard
from suite.runguard import UsageError, lock

ROOT = Path(__file__).resolve().parent.parent


def suite_cmd(*argv: str, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "suite", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        **kw,
    )


def test_a_held_run_directory_is_refused_and_names_its_holder(tmp_path):
    run = tmp_path / "run"
    (run / "results").mkdir(parents=True)
    with lock(run):
        holder = (run / runguard.LOCK).read_text()
        assert f"pid {os.getpid()} on " in holder
        for argv in (["reproduce", "--out", str(run)], ["report", str(run)]):
            res = suite_cmd(*argv)
            assert res.returncode == 2, res.stderr
            assert "Traceback" not in res.stderr
            (line,) = res.stderr.strip().splitlines()
            assert line.startswith(f"error: {run} is being written by another run (pid ")
            assert f"pid {os.getpid()} on " in line
        with pytest.raises(UsageError, match="being written by another run"), lock(run):
            pass  # the same process, another open file: flock still says no
    assert not (run / runguard.LOCK).exists()  # the holder removes it


def test_a_lock_whose_holder_died_is_taken_over(tmp_path):
    """A holder killed outright leaves its lock file; the kernel dropped its flock, so the next
    writer takes the directory, and its own name replaces the dead one's."""
    run = tmp_path / "run"
    run.mkdir()
    code = (
        "import os, sys; from pathlib import Path; from suite.runguard import lock\n"
        "with lock(Path(sys.argv[1])):\n    os.kill(os.getpid(), 9)\n"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(run)], env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    assert "pid " in (run / runguard.LOCK).read_text()  # left by the dead holder
    with lock(run):
        assert f"pid {os.getpid()} on " in (run / runguard.LOCK).read_text()


@pytest.mark.slow
def test_two_concurrent_runs_one_refuses_the_other_completes(tmp_path):
    """Two real CPU runs on one --out, the second started while the first holds it."""
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "suite", "reproduce", "--profile", "cpu", "--only", "shapes"]
    first = subprocess.Popen(
        [*argv, "--out", str(run)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while not (run / runguard.LOCK).exists() or not (run / runguard.LOCK).read_text():
        assert first.poll() is None and time.time() < deadline
        time.sleep(0.1)
    second = suite_cmd("reproduce", "--profile", "cpu", "--only", "shapes", "--out", str(run))
    assert second.returncode == 2 and "Traceback" not in second.stderr
    assert f"is being written by another run (pid {first.pid} on " in second.stderr
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err
    assert (run / "results" / "shapes.done.json").exists() and (run / "report.html").exists()
    assert not (run / runguard.LOCK).exists()
