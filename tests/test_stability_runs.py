"""tools/stability_runs.py files a GPU's repeated runs the way the stability folders hold them:
each run's summaries as written and its small raw tables, the summaries rebuilt by today's code,
both coverage tables; runs of two commits are refused. CPU: the H100 quick reference packed as
two run.tgz (the rebuild itself is suite.report.build's, tested elsewhere; here it is stubbed)."""

import json
import shutil
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "reports" / "reference" / "h100" / "quick-c2036da"
SMALL = ("claims.json", "metrics.csv", "env.json")


@pytest.fixture
def tool(monkeypatch):
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import stability_runs
    finally:
        sys.path.remove(str(ROOT / "tools"))
    import suite.report.build as build

    rebuilt = []
    monkeypatch.setattr(build, "build_report", lambda run: rebuilt.append(Path(run).name))
    return stability_runs, rebuilt


def _tgz(tmp: Path, name: str, sha: str | None = None) -> Path:
    run = tmp / name / "run-quick"
    (run / "results").mkdir(parents=True)
    for f in SMALL:
        shutil.copy2(REFERENCE / f, run / f)
    for f in ("e2e_steps.csv", "kernels_timings.csv", "shapes_sweep.csv"):
        shutil.copy2(REFERENCE / "results" / f, run / "results" / f)
    if sha:
        env = json.loads((run / "env.json").read_text())
        env["git"]["sha"] = sha
        (run / "env.json").write_text(json.dumps(env))
    path = tmp / f"{name}.tgz"
    with tarfile.open(path, "w:gz") as t:
        t.add(run, arcname="run-quick")
    return path


def test_runs_are_filed_as_written_and_as_rebuilt(tool, tmp_path):
    stability_runs, rebuilt = tool
    out = tmp_path / "stability"
    tgz = [_tgz(tmp_path, f"r{i}") for i in (1, 2)]
    log = tmp_path / "log"
    log.write_text("reproduce exit 0 after 510 s\n")
    whole = tmp_path / "quick"
    assert stability_runs.main([str(out), *map(str, tgz), "--logs", str(log), str(log),
                                "--whole", "2", str(whole)]) == 0  # fmt: skip
    assert rebuilt == ["run-quick", "run-quick"]
    for i in (1, 2):
        assert all((out / f"run{i}" / f).is_file() for f in (*SMALL, "reproduce.log"))
        assert sorted(p.name for p in (out / f"run{i}" / "raw").iterdir()) == [
            "e2e_steps.csv",
            "kernels_timings.csv",
        ]  # fmt: skip  (the sweep is not a small table)
        assert all((out / "summaries-now" / f"run{i}" / f).is_file() for f in SMALL)
    assert (whole / "results" / "shapes_sweep.csv").is_file() and (
        whole / "reproduce.log"
    ).is_file()
    for table in (out / "table.md", out / "summaries-now" / "table.md"):
        assert "pooled coverage" in table.read_text()


def test_runs_of_two_commits_are_refused(tool, tmp_path):
    stability_runs, _ = tool
    tgz = [_tgz(tmp_path, "a"), _tgz(tmp_path, "b", sha="0000000")]
    with pytest.raises(SystemExit, match="more than one"):
        stability_runs.main([str(tmp_path / "out"), *map(str, tgz)])
