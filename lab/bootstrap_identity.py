"""Is the balance bootstrap centred? The replicate of a run's sweep without resampling, beside the
full-data fit and the run's claim values.

    PYTHONPATH=. python3 lab/bootstrap_identity.py RUN [--replicates 3]

RUN is a folder whose results/ holds shapes_sweep and costmodel_fit (a reproduce run, or a
`tools/rebalance.py` output, whose metrics.csv gives the full-data values). Each replicate refits
the identity resample (every shape once, its repeats as measured) and simulates with its own plan
seed, so the spread between replicates is plan-seed noise only. A centred bootstrap refits the
full-data p, M_mem and s_cross and reads the claim values within that noise. Run with PYTHONPATH
at an older checkout (e.g. a62dfde, before the centring) to see the replicate that was off.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

METRICS = ["imbalance_rate_reduction_sim", "rank_cv_sim", "step_cv_sim", "throughput_gain_8_sim",
           "throughput_gain_16_sim", "floor_gain_sim"]  # fmt: skip


def identity(sweep: pd.DataFrame) -> pd.DataFrame:
    """Every shape once, its repeats as measured (columns copy and shape as the resample's)."""
    groups = [g for _, g in sweep.groupby(["B", "S"], sort=True)]
    return pd.concat([g.assign(copy=i, shape=i) for i, g in enumerate(groups)], ignore_index=True)


def main(argv: list[str] | None = None) -> int:
    from suite.experiments.balance import _mixes, _sweep
    from suite.experiments.balance import bootstrap as bs
    from suite.rundir import RunDir

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--replicates", type=int, default=3)
    a = ap.parse_args(argv)
    run = RunDir(a.run)
    try:
        sweep = _sweep(run, marked=True)
    except TypeError:  # code before the centred bootstrap (PYTHONPATH at an older checkout)
        sweep = _sweep(run)
    fit = run.read_table("costmodel_fit")
    fit_row = fit[fit["variant"] == "free"].iloc[0].to_dict()
    mixes = _mixes(0)
    bs.resample_sweep = lambda sw, rng: identity(sw)  # this process only
    reps = pd.concat([bs.replicate(sweep, fit_row, mixes, 1000, 0, r) for r in range(a.replicates)])
    print(f"full data: p {fit_row['p']:.4f}, M_mem {fit_row['m_mem']:.0f}")
    print(reps[["p", "m_mem", "s_cross", "noise_cv"]].drop_duplicates().to_string(index=False))
    got = reps.groupby("metric")["value"].agg(["mean", "std"]).reindex(METRICS)
    if (a.run / "metrics.csv").is_file():
        full = pd.read_csv(a.run / "metrics.csv").set_index("metric")["value"]
        got["full data"] = full.reindex(METRICS)
    print(got.round(2).to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
