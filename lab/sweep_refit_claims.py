"""Re-fit a committed run's shape sweep with today's costmodel (launch-bound shapes left out) and
re-simulate the balance claims C4-C9 on it: how the fit's change moves C7/C8 without a GPU run.

    PYTHONPATH=. python3 lab/sweep_refit_claims.py reports/reference/h200/quick-5753865 \\
        [--fitted] [--replicates 12] [--out /tmp/refit]

--fitted also hands balance's own refits (its step model with the optimizer apart, its bootstrap)
the sweep without the launch-bound shapes (suite.experiments.costmodel.fitted_sweep). Balance runs
at the quick profile's settings whatever the run's profile, so two runs compare on their sweeps
alone; few replicates give rough intervals (12: ~1-3 min on 2 cores).
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import pandas as pd


def main() -> None:
    from suite.claims import evaluate
    from suite.experiments import balance
    from suite.experiments import costmodel as exp
    from suite.rundir import RunContext, RunDir

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", type=Path, help="a run folder with results/shapes_sweep, costmodel_fit")
    ap.add_argument("--fitted", action="store_true", help="balance refits the fitted rows only")
    ap.add_argument("--replicates", type=int, default=12)
    ap.add_argument("--out", type=Path, default=Path("/tmp/refit"))
    a = ap.parse_args()
    src = a.run / "results"
    out = a.out / f"{a.run.name}-{'fitted' if a.fitted else 'raw'}"
    shutil.rmtree(out, ignore_errors=True)
    run = RunDir(out)
    sweep = pd.read_csv(src / "shapes_sweep.csv")
    capacity = pd.read_csv(src / "costmodel_fit.csv")["capacity_bytes"].iloc[0]
    tables = exp.fit_tables(sweep, capacity)
    for name, table in tables.items():
        run.write_table(name, table)
    run.write_table("shapes_sweep", exp.fitted_sweep(sweep) if a.fitted else sweep)
    free = tables["costmodel_fit"].iloc[0]
    print(f"p {free['p']:.4f}, s_cross {free['s_cross']:.0f}, launch-bound left out: "
          f"{int(free['launch_bound_shapes'])}")  # fmt: skip
    t0 = time.time()
    opts = {"balance_workers": 2, "balance_replicates": a.replicates}
    rows = balance.summarize(balance.run(RunContext(run, "quick", "cpu", options=opts)))
    print(f"balance re-simulated in {time.time() - t0:.0f} s")
    for v in evaluate(rows):
        if v.id in ("C4", "C5", "C6", "C7", "C8", "C9"):
            print(f"{v.id} {v.verdict:14} {v.metric:28} {v.measured:.2f} [{v.ci_low:.2f}, "
                  f"{v.ci_high:.2f}]")  # fmt: skip


if __name__ == "__main__":  # spawned balance workers re-import this file
    main()
