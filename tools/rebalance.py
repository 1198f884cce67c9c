"""Run the balance experiment again on a committed run's measured tables, with any profile, on
this machine (CPU only: it simulates, it does not measure).

    PYTHONPATH=. python tools/rebalance.py RUN --profile full --out DIR [--refit] [--keep-steps]

Copies the tables balance reads from RUN/results/ (shapes_sweep and costmodel_* that the
simulation is costed by, training_ranks for its validation row) to DIR/results/, runs suite.experiments.balance with that profile, writes its
tables beside them and its metric rows to DIR/metrics.csv. --refit fits the costmodel tables
again from the sweep with today's code (M_mem from the GPU memory RUN ran on) instead of copying
RUN's: a run made before a change of the fits then reads as today's code would have run it
(the bootstrap always refits with today's code, so without --refit an older run's value and its
interval can come from two different fits). balance_steps and balance_ranks (the
big ones) are removed afterwards unless --keep-steps. E.g. the full profile's comparison on the
H200 quick reference's sweep (reports/reference/h200/quick-5753865/balance-full-cpu).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("run", type=Path, help="a run directory with results/ (a shape sweep and fits)")
    p.add_argument("--profile", choices=("cpu", "quick", "full"), default="full")
    p.add_argument("--out", type=Path, required=True, help="where to write (a new directory)")
    p.add_argument(
        "--refit", action="store_true", help="fit the costmodel tables with today's code"
    )
    p.add_argument("--keep-steps", action="store_true", help="keep balance_steps, balance_ranks")
    a = p.parse_args(argv)
    src = a.run / "results"
    if not (src / "shapes_sweep.csv").is_file() and not (src / "shapes_sweep.csv.gz").is_file():
        p.error(f"{src}: no shapes_sweep table (give a run directory with results/)")
    if a.out.exists():
        p.error(f"--out {a.out} exists: give a new directory")
    if a.refit and not any(src.glob("costmodel_fit.csv*")):
        p.error(f"--refit: {src} has no costmodel_fit table (it names the GPU memory to fit to)")
    try:
        (a.out / "results").mkdir(parents=True)
    except OSError as e:
        p.error(f"--out {a.out}: cannot make it ({e.strerror})")

    from suite.experiments import balance
    from suite.experiments.balance import summary as balance_summary
    from suite.progress import Progress
    from suite.rundir import RunContext, RunDir

    for pattern in ("shapes_sweep.*", "training_ranks.*") + (() if a.refit else ("costmodel_*",)):
        for f in src.glob(pattern):
            shutil.copy2(f, a.out / "results" / f.name)
    run = RunDir(a.out)
    progress = Progress(sys.stderr)  # the experiment's lines: each simulated run, i of n
    t0 = time.perf_counter()
    if a.refit:
        from suite.experiments import costmodel

        capacity = float(RunDir(a.run).read_table("costmodel_fit")["capacity_bytes"].iloc[0])
        fit_ctx = RunContext(
            run, a.profile, "cpu", options={"capacity_bytes": capacity}, progress=progress
        )
        for name, df in costmodel.run(fit_ctx).items():
            run.write_table(name, df)
    ctx = RunContext(run=run, profile=a.profile, device="cpu", progress=progress)
    tables = balance.run(ctx)
    progress.close()
    for name, df in tables.items():
        run.write_table(name, df)
    balance_summary.summarize(tables).to_csv(a.out / "metrics.csv", index=False)
    print(f"balance ({a.profile} profile) on {src}: {time.perf_counter() - t0:.1f} s -> {a.out}")
    if not a.keep_steps:
        for f in (a.out / "results").glob("balance_[sr][ta]*"):  # balance_steps, balance_ranks
            f.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
