"""The step model's held-out error if launch-bound steps were priced at the median launch-bound
step instead of the launch floor the model uses (the fastest shape's median,
suite.balance.shapebench.launch_bound). A lead, not adopted: the floor is part of the model the
simulated claims use (lab/LOG.md).

    PYTHONPATH=. python lab/launch_floor_price.py RUN [RUN ...]

A RUN is a run directory whose results/ hold costmodel_launch_bound and costmodel_heldout.
Prints per run: the floor and the median launch-bound step, and the mean |relative error| of
the held-out shapes, overall and by region, under each price.
"""

from __future__ import annotations

import argparse
import glob
from pathlib import Path

import numpy as np
import pandas as pd


def table(run: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(glob.glob(str(run / "results" / f"{name}.csv*"))[0])


def errors(run: Path) -> tuple[float, float, pd.DataFrame]:
    """(floor, median launch-bound step, per held-out shape: region and |error| in % under the
    floor and under the median)."""
    lb, ho = table(run, "costmodel_launch_bound"), table(run, "costmodel_heldout")
    floor = float(lb["floor_s"].iloc[0])
    typical = float(lb.loc[lb["launch_bound"], "median_s"].median())
    # pred_s = max(floor, the fitted work): above the floor the price does not move
    work = ho["pred_s"].where(ho["pred_s"] > floor, 0.0)
    err = lambda pred: 100 * (pred / ho["median_s"] - 1).abs()  # noqa: E731
    out = ho[["region"]].assign(floor=err(ho["pred_s"]), median=err(np.maximum(typical, work)))
    return floor, typical, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    for run in ap.parse_args(argv).runs:
        floor, typical, e = errors(run)
        by = e.groupby("region")[["floor", "median"]].mean()
        regions = ", ".join(f"{r} {v['floor']:.1f} -> {v['median']:.1f}" for r, v in by.iterrows())
        print(
            f"{run}: price {floor:.3f} s -> {typical:.3f} s; held-out mean "
            f"{e['floor'].mean():.1f}% -> {e['median'].mean():.1f}% ({regions})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
