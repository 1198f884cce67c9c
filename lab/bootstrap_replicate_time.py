"""Seconds per hierarchical-bootstrap replicate (suite.experiments.balance.bootstrap.replicate)
on a run's own sweep, in this process, with an optional cProfile of one replicate. What the
perf notes' "Bootstrap replicate" entry measured. To compare commits, run it against each
commit's tree with PYTHONPATH=<that tree> (an installed checkout wins otherwise); the replicates'
rows are printed as a digest, equal when the tables are.

    PYTHONPATH=. python lab/bootstrap_replicate_time.py reports/reference/h200/quick-85dc565 \
        [--replicates 2] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import pstats
import time
from pathlib import Path

import pandas as pd


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("run", type=Path, help="a run directory with results/ (sweep and cost fit)")
    ap.add_argument("--replicates", type=int, default=2, help="replicates timed (after a warm-up)")
    ap.add_argument("--profile", action="store_true", help="cProfile the last replicate")
    a = ap.parse_args(argv)

    from suite.experiments.balance import _mixes, _sweep
    from suite.experiments.balance import bootstrap as bb
    from suite.rundir import RunDir

    run = RunDir(a.run)
    sweep = _sweep(run, marked=True)
    fit = run.read_table("costmodel_fit")
    fit_row = fit[fit["variant"] == "free"].iloc[0].to_dict()
    mixes = _mixes(0)
    bb.replicate(sweep, fit_row, mixes, 1000, 0, 0)  # warm-up: imports, caches
    rows, prof = [], cProfile.Profile()
    t0 = time.perf_counter()
    for r in range(1, a.replicates + 1):
        if a.profile and r == a.replicates:
            prof.enable()
        rows.append(bb.replicate(sweep, fit_row, mixes, 1000, 0, r))
    prof.disable()
    dt = (time.perf_counter() - t0) / a.replicates
    digest = hashlib.sha1(pd.concat(rows).to_csv(index=False).encode()).hexdigest()[:12]
    print(f"{dt:.2f} s a replicate over {a.replicates} (1000 steps); rows digest {digest}")
    if a.profile:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(15)


if __name__ == "__main__":
    main()
