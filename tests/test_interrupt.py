"""Stopping a CPU run with SIGINT or SIGTERM, to its main process or its process group, with and
without nox: the run stops with 128 + the signal number (nox: 130), prints the resume line,
leaves no process behind (found by an environment marker in /proc), keeps the experiments it
finished and leaves the report files whole; a rerun completes with the claims of an
uninterrupted run.

The fast tests stop a run during its first experiment; the slow one stops one run at two
points (during the balance simulation, whose worker processes are alive then, and while the
report is built) and resumes it."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from test_reproduce import fake  # noqa: F401  (the fake-experiments fixture)

ROOT = Path(__file__).resolve().parent.parent
NEEDS_NOX = pytest.mark.skipif(
    importlib.util.find_spec("nox") is None, reason="nox is not importable by this interpreter"
)
MARK = "SUITE_INTERRUPT_TEST"  # environment marker of every process a run starts
RESUME = "rerun with --out"
SHAPES = "[shapes] shapes:"  # a line the first experiment logs
BALANCE = "[balance] balance: run 2/"  # balance's worker processes are running
REPORT = "building the report"
EXPERIMENTS = ("shapes", "costmodel", "balance")  # what a CPU run does


def start(out: Path, nox: bool, *extra: str) -> tuple[subprocess.Popen, Path, str]:
    """A CPU run into `out` in its own process group; returns it, its log and its marker."""
    mark = uuid.uuid4().hex
    args = ["--profile", "cpu", "--out", str(out), *extra]
    if nox:
        cmd = [
            sys.executable,
            "-m",
            "nox",
            "--no-venv",
            "--no-install",
            "-s",
            "reproduce",
            "--",
            *args,
        ]
    else:
        cmd = [sys.executable, "-m", "suite", "reproduce", *args]
    log = out.with_suffix(f".{mark[:6]}.log")
    env = {**os.environ, MARK: mark, "PYTHONPATH": str(ROOT)}
    with log.open("w") as f:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True
        )
    return proc, log, mark


def survivors(mark: str) -> list[str]:
    """Command lines of the live processes carrying `mark` in their environment."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes().split(b"\0")
            if f"{MARK}={mark}".encode() in env and (d / "stat").read_text().split()[2] != "Z":
                found.append((d / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, IndexError):
            continue
    return found


def wait_for(proc: subprocess.Popen, log: Path, text: str, timeout: float = 400) -> None:
    deadline = time.time() + timeout
    while text not in log.read_text(errors="replace"):
        assert proc.poll() is None, f"exited {proc.returncode} before {text!r}: {log.read_text()}"
        assert time.time() < deadline, f"no {text!r} in {timeout} s"
        time.sleep(0.1)


def stop(out: Path, nox: bool, at: str, sig: int, group: bool) -> tuple[str, float]:
    """Start a run, send `sig` when its log shows `at`, check the stop; returns (log, seconds)."""
    proc, log, mark = start(out, nox)
    wait_for(proc, log, at)
    sent = time.time()
    (os.killpg if group else os.kill)(proc.pid, sig)
    code = proc.wait(timeout=120)
    seconds = time.time() - sent
    text = log.read_text(errors="replace")
    assert code == (130 if nox else 128 + sig), text
    assert f"{RESUME} {out} to resume" in text
    assert "Traceback" not in text
    deadline = time.time() + 5  # the resource tracker exits once its last client is gone
    while (left := survivors(mark)) and time.time() < deadline:
        time.sleep(0.1)
    assert not left, f"processes outlived the run: {left}"
    assert not (out / ".lock").exists() and not (out / ".report.new").exists()
    return text, seconds


def done(out: Path) -> set[str]:
    return {p.name.removesuffix(".done.json") for p in (out / "results").glob("*.done.json")}


def finish(out: Path, nox: bool = False) -> list[dict]:
    proc, log, _ = start(out, nox)
    assert proc.wait(timeout=900) == 0, log.read_text()
    assert done(out) == set(EXPERIMENTS)
    return json.loads((out / "claims.json").read_text())


def same_claims(a: list[dict], b: list[dict]) -> None:
    """The same claims judged from the same metrics on the same evidence. Values rest on this
    machine's timings (the shape sweep's), so two CPU runs agree on what was measured, not on
    the digits, nor on a verdict near a boundary (C2 and C6 flip between loaded runs)."""
    keys = ("id", "metric", "evidence", "unit", "ranks")
    assert [{k: c[k] for k in keys} for c in a] == [{k: c[k] for k in keys} for c in b]
    not_run = lambda cs: {c["id"]: c["reason"] for c in cs if c["verdict"] == "not-run"}  # noqa: E731
    assert not_run(a) == not_run(b)
    measured = lambda cs: {c["id"] for c in cs if c["measured"] == c["measured"]}  # noqa: E731
    assert measured(a) == measured(b)


@pytest.mark.parametrize(
    ("nox", "sig", "group"),
    [(False, signal.SIGTERM, False), pytest.param(True, signal.SIGINT, True, marks=NEEDS_NOX)],
    ids=["sigterm-process", "nox-sigint-group"],
)
def test_a_run_stopped_early_stops_fast_and_leaves_nothing(tmp_path, nox, sig, group):
    _, seconds = stop(tmp_path / "run", nox, SHAPES, sig, group)
    assert seconds < 15  # nox would SIGKILL after its grace period (noxfile.py TERMINATE_S)
    assert done(tmp_path / "run") == set()


@pytest.mark.slow
@NEEDS_NOX
def test_a_run_stopped_anywhere_resumes_to_the_claims_of_an_uninterrupted_run(tmp_path):
    """Stopped under nox by a SIGTERM to nox alone while balance's workers run, then without nox
    by a Ctrl-C to the group while the report is built, the run resumes to the claims of a run
    never stopped. (One sequence: each stop costs a CPU run's time.)"""
    out = tmp_path / "run"
    stop(out, True, BALANCE, signal.SIGTERM, False)
    assert done(out) == {"shapes", "costmodel"}  # finished before the stop: kept
    kept = {p: p.read_bytes() for p in (out / "results").iterdir()}
    stop(out, False, REPORT, signal.SIGINT, True)
    assert done(out) == set(EXPERIMENTS)
    assert not [p for p in out.iterdir() if p.name in ("report.html", "claims.json")]
    same_claims(finish(out), finish(tmp_path / "reference"))
    assert all(p.read_bytes() == data for p, data in kept.items())  # reused, not redone


def test_a_report_build_stopped_midway_leaves_the_old_report(fake, tmp_path, monkeypatch):  # noqa: F811
    """The report's files are one unit: stopped after metrics.csv, claims.json and the figures
    were written (while the PDF is drawn), the run keeps its previous report files, byte for
    byte, and no staging folder."""
    from suite import reproduce
    from suite.report import build, pdf

    run = tmp_path / "run"
    reproduce.main(["--out", str(run)])
    outputs = [p for p in sorted(run.rglob("*")) if p.is_file() and "results" not in p.parts]
    before = {p: p.read_bytes() for p in outputs}
    assert {"metrics.csv", "claims.json", "report.html", "report.pdf"} <= {p.name for p in before}
    (run / "results" / "balance_steps.csv").write_text("step,cv\n0,0.5\n1,0.6\n2,0.7\n")

    def stopped(*args, **kw):
        raise KeyboardInterrupt("stopped while drawing the PDF")

    monkeypatch.setattr(pdf, "write_pdf", stopped)
    with pytest.raises(KeyboardInterrupt):
        build.build_report(run)
    after = [p for p in sorted(run.rglob("*")) if p.is_file() and "results" not in p.parts]
    assert after == outputs and all(p.read_bytes() == before[p] for p in outputs)
    assert not (run / build.STAGING).exists()
