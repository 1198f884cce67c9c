"""Could a quick-profile shape sweep decide C2 and C5 the way the full one does? Each candidate
design is a subset of a full run's measured sweep (the full grid holds every quick shape, and
both time 2 repeats a shape), so a design's C2 and C5 read what that sweep would have given on
the same GPU and the same day, and its seconds are the run's own medians (warm-up + 2 repeats).

    PYTHONPATH=. python lab/quick_sweep_design.py RUN [--balance OUT]

RUN: a full run's directory (results/shapes_sweep). Prints per design: shapes, estimated sweep
seconds, C2 (Pearson R of median step time with B*S^2 and its interval, as the costmodel rows
compute it). --balance OUT also refits and re-simulates each design with the quick profile
(tools/rebalance.py --refit, ~110 s a design on 2 cores) and prints C4, C5 (as the relative
reduction the claim is judged on) and C8 with their intervals. The quick profile's own design
comes first: it must give back the quick runs' inconclusive C2 and C5, or the method is wrong.
"""

from __future__ import annotations

import argparse
import glob
import math
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from suite.balance.shapebench import equal_token_batch, equal_token_grid
from suite.experiments.costmodel.sweep import FULL_BUCKETS, M_TOK, QUICK_BUCKETS
from suite.stats import pearson_ci

QUICK = set(equal_token_grid(QUICK_BUCKETS, M_TOK, 12_000))
FULL_EQUAL_TOKEN = {(equal_token_batch(s, M_TOK), s) for s in FULL_BUCKETS}
DESIGNS = {
    "quick profile (8 buckets, ladder <= 12k)": QUICK,
    "quick buckets, ladder <= 25k": set(equal_token_grid(QUICK_BUCKETS, M_TOK, 25_000)),
    "quick + B = 1 at 54,000 and 68,400": QUICK | {(1, 54_000), (1, 68_400)},
    "quick + the full buckets' equal-token shapes": QUICK | FULL_EQUAL_TOKEN,
    "full buckets, ladder <= 12k": set(equal_token_grid(FULL_BUCKETS, M_TOK, 12_000)),
    "full profile (16 buckets, ladder <= 25k)": set(equal_token_grid(FULL_BUCKETS, M_TOK, 25_000)),
}


def read(run: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(glob.glob(str(run / "results" / f"{name}.csv*"))[0])


def c2(med: pd.Series, shapes) -> tuple[float, float, float]:
    sh = sorted(shapes)
    B, S = (np.array(x, float) for x in zip(*sh))
    return pearson_ci(B * S**2, med.loc[sh].to_numpy(float), seed=0)


def balance_rows(run: Path, sweep: pd.DataFrame, shapes, out: Path) -> dict[str, tuple]:
    """C4, C5 (relative reduction) and C8 of the quick profile's balance on `shapes` alone."""
    from tools import rebalance

    with tempfile.TemporaryDirectory() as tmp:
        res = Path(tmp) / "results"
        res.mkdir()
        keep = [(b, s) in shapes for b, s in zip(sweep.B, sweep.S)]
        sweep[keep].to_csv(res / "shapes_sweep.csv", index=False)
        read(run, "costmodel_fit").to_csv(res / "costmodel_fit.csv", index=False)
        rebalance.main([tmp, "--profile", "quick", "--refit", "--out", str(out)])
    m = pd.read_csv(out / "metrics.csv").set_index("metric")
    r = m.loc["rank_cv_sim"]
    rel = lambda v: 100 * (1 - v / r.baseline)  # noqa: E731  (suite.claims' reduction reading)
    return {
        "C4": tuple(m.loc["imbalance_rate_reduction_sim", ["value", "ci_low", "ci_high"]]),
        "C5": (rel(r.value), rel(r.ci_high), rel(r.ci_low)),
        "C8": tuple(m.loc["throughput_gain_16_sim", ["value", "ci_low", "ci_high"]]),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("run", type=Path, help="a full run's directory")
    ap.add_argument("--balance", type=Path, help="also re-simulate each design, tables under here")
    a = ap.parse_args(argv)
    sweep = read(a.run, "shapes_sweep")
    med = sweep.groupby(["B", "S"])["step_s"].median()
    fmt = lambda t: f"{t[0]:.3g} [{t[1]:.3g}, {t[2]:.3g}]"  # noqa: E731
    for i, (name, shapes) in enumerate(DESIGNS.items()):
        if missing := sorted(s for s in shapes if s not in med.index):
            print(f"{name}: not in this run's sweep: {missing}")
            continue
        line = f"{name:46s} {len(shapes):2d} shapes ~{3 * med.loc[sorted(shapes)].sum():4.0f} s"
        line += f"  C2 {fmt(c2(med, shapes))}"
        if a.balance:
            rows = balance_rows(a.run, sweep, shapes, a.balance / f"design{i}")
            line += "".join(
                f"  {k} {fmt(v)}" for k, v in rows.items() if all(map(math.isfinite, v))
            )
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
