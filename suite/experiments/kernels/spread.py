"""Between-run spread of the kernel speedups (C11, C12), per GPU model.

A run's bootstrap interval holds its own repetition noise only. Another run of the same code
on the same GPU model reads differently: another unit has its own memory bandwidth (two H100s
at one commit read C11 8.85x and 8.80x, 0.6% apart, with bootstrap intervals 0.1% wide), and
one unit drifts between runs. run_spread.csv holds, per GPU model, the pooled standard
deviation tau of log(speedup) across committed repeat runs of one commit (every speedup metric
of C11 and C12, each centred on its own mean over the runs). tools/kernel_run_spread.py computes
a row from the runs' metrics.csv; its `units` column is a lower bound on the distinct GPUs the
runs used, so a row that cannot tell its runs' units apart says it may miss unit-to-unit spread.

A speedup's 95% interval is then, on each side, the wider of the run's bootstrap and
1.96 * tau in log space: two runs with that spread differ by more than 1.96 * tau about 17% of
the time, so one run's interval holds another's value about 83% of the time.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import pandas as pd

TABLE = Path(__file__).with_name("run_spread.csv")
COLUMNS = ["gpu", "commit", "runs", "units", "df", "tau_log", "source"]
Z = 1.96


@cache
def spreads() -> pd.DataFrame:
    return pd.read_csv(TABLE)


def spread_for(gpu: str) -> dict | None:
    """The run_spread row of GPU model `gpu` (nvidia-smi's name), or None."""
    rows = spreads()[spreads()["gpu"] == gpu]
    return None if rows.empty else rows.iloc[0].to_dict()


def widen(value: float, lo: float, hi: float, tau_log: float) -> tuple[float, float]:
    """(lo, hi) with each side at least Z * tau_log from value in log space; NaN ends stay NaN."""
    if not (math.isfinite(value) and value > 0 and math.isfinite(lo) and math.isfinite(hi)):
        return lo, hi
    reach = math.exp(Z * tau_log)
    return min(lo, value / reach), max(hi, value * reach)


def describe(row: dict | None, gpu: str | None) -> str:
    """The interval's model in words, for the metric's conditions."""
    if gpu is None:
        return "between runs: not included (the run's tables do not name its GPU)"
    if row is None:
        return f"between runs: not included (no committed repeat runs of {gpu})"
    units = int(row["units"])
    of_units = (
        f"at least {units} GPU units"
        if units > 1
        else "GPUs not told apart, possibly one unit: unit-to-unit spread may be missing"
    )
    return (
        f"widened where narrower to +-{Z} x the between-run log SD {100 * row['tau_log']:.2f}% "
        f"of {gpu} ({int(row['runs'])} runs at {row['commit']} on {of_units}; "
        f"{int(row['df'])} d.f.; {row['source']})"
    )


def pooled_tau(values: pd.DataFrame) -> tuple[float, int]:
    """(tau, d.f.): pooled SD of log(value) across runs (columns), each metric (row) centred on
    its own mean; rows with a missing run are left out."""
    logs = values.dropna().map(math.log)
    if logs.shape[1] < 2 or logs.empty:
        raise ValueError("need at least two runs and one metric with a value in every run")
    dev = logs.sub(logs.mean(axis=1), axis=0)
    df = logs.shape[0] * (logs.shape[1] - 1)
    return math.sqrt(float((dev**2).to_numpy().sum()) / df), df
