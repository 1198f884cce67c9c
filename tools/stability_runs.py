"""Commit a GPU's repeated quick runs as a stability folder: from the run.tgz each device call
brought back (tools/device/reproduce.sh), write

    OUT/runN/            claims.json, metrics.csv, env.json as the run wrote them, and its log
    OUT/runN/raw/        its small raw tables (kernel timings and samples, e2e steps, training
                         budgets and runs): not a whole results/, so not a rebuildable run
    OUT/summaries-now/runN/   claims.json, metrics.csv, env.json rebuilt by today's code
                         (python -m suite report on the whole run directory)
    OUT/table.md, OUT/summaries-now/table.md   tools/verdict_stability.py over them

and with --whole N DIR the whole rebuilt run directory of run N (the GPU's quick reference).

    PYTHONPATH=. python tools/stability_runs.py OUT RUN1.tgz RUN2.tgz RUN3.tgz \\
        [--logs LOG1 LOG2 LOG3] [--whole 2 reports/reference/h200/quick-SHA]

Each tgz holds one run directory (run-quick/ from reproduce.sh). The runs must be of one commit
and one GPU model (their env.json says; a mismatch is refused). Prints both tables' acceptance.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tools"))

SUMMARIES = ("claims.json", "metrics.csv", "env.json")
# small tables a reader needs to check the measured claims without the whole run
RAW = ("kernels_timings", "kernels_samples", "e2e_steps", "training_info", "training_runs")


def unpack(tgz: Path, into: Path) -> Path:
    """The one run directory inside `tgz`, extracted under `into`."""
    with tarfile.open(tgz) as t:
        t.extractall(into, filter="data")
    runs = [p for p in into.iterdir() if (p / "results").is_dir()]
    if len(runs) != 1:
        raise SystemExit(f"{tgz}: expected one run directory with results/, found {len(runs)}")
    return runs[0]


def one_commit_and_gpu(runs: list[Path]) -> None:
    import json

    from suite.spread import gpu_and_commit

    seen = {gpu_and_commit(json.loads((r / "env.json").read_text())) for r in runs}
    if len(seen) != 1:
        raise SystemExit(f"runs of more than one (GPU model, commit): {sorted(map(str, seen))}")


def copy(src: Path, names, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for n in names:
        if (src / n).is_file():
            shutil.copy2(src / n, dest / n)


def stability(folders: list[Path], out: Path) -> str:
    import verdict_stability

    text, _, _ = verdict_stability.report(verdict_stability.by_gpu([str(f) for f in folders]))
    out.write_text(text + "\n", encoding="utf-8")
    return text.strip().splitlines()[-1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "out", type=Path, help="the stability folder, e.g. reports/reference/h200/stability-SHA"
    )
    ap.add_argument("tgz", type=Path, nargs="+", help="each run's run.tgz, in run order")
    ap.add_argument(
        "--logs", type=Path, nargs="*", default=[], help="each run's console log, same order"
    )
    ap.add_argument(
        "--whole", nargs=2, metavar=("N", "DIR"), help="copy run N's whole directory to DIR"
    )
    a = ap.parse_args(argv)
    if len(a.tgz) < 2:
        ap.error("give at least two runs")
    if a.logs and len(a.logs) != len(a.tgz):
        ap.error(f"--logs names {len(a.logs)} logs for {len(a.tgz)} runs")
    from suite.report.build import build_report

    with tempfile.TemporaryDirectory() as tmp:
        runs = [unpack(t, Path(tmp) / f"run{i}") for i, t in enumerate(a.tgz, 1)]
        one_commit_and_gpu(runs)
        for i, run in enumerate(runs, 1):
            written = a.out / f"run{i}"
            copy(run, SUMMARIES, written)  # as the run wrote them, before the rebuild
            copy(
                run / "results",
                [f"{t}.csv" for t in RAW] + [f"{t}.csv.gz" for t in RAW],
                written / "raw",
            )
            if a.logs:
                shutil.copy2(a.logs[i - 1], written / "reproduce.log")
            print(f"run {i}: rebuilding {run.name} with today's code ...", flush=True)
            build_report(run)
            copy(run, SUMMARIES, a.out / "summaries-now" / f"run{i}")
        if a.whole:
            n, dest = int(a.whole[0]), Path(a.whole[1])
            shutil.copytree(runs[n - 1], dest, dirs_exist_ok=True)
            (dest / ".sha").unlink(missing_ok=True)
            if a.logs:
                shutil.copy2(a.logs[n - 1], dest / "reproduce.log")
    n = len(a.tgz)
    print(
        "as written:", stability([a.out / f"run{i}" for i in range(1, n + 1)], a.out / "table.md")
    )
    now = a.out / "summaries-now"
    print(
        "today's summaries:",
        stability([now / f"run{i}" for i in range(1, n + 1)], now / "table.md"),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
