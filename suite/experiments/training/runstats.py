"""Two training runs compared step by step: the ledger's per-step statistics (STATS), their 95%
bootstrap intervals over steps, and the regrouping of an R-rank run into fewer ranks per step.

A run is known by its key (run name, world) in the table `run_summaries` builds:
key -> (step table, summary row). Intervals resample steps (N_BOOT resamples,
suite.stats.bootstrap_runs), paired (the same step indices drawn from both runs) where the two
runs trained the same batches at every step and rank, otherwise each run's steps on their own.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from suite.experiments.training.losscurves import same_batches
from suite.stats import bootstrap_runs
from suite.train.logs import step_table, summary_table

N_BOOT = 2000


def regroup(rows: pd.DataFrame, world: int) -> pd.DataFrame:
    """Split each R-rank step into R/world steps of `world` ranks and recompose the step times."""
    R = int(rows["world"].iloc[0])
    if R % world:
        raise ValueError(f"cannot split {R} ranks into steps of {world}")
    k = R // world
    r = rows.copy()
    r["step"] = r["step"] * k + r["rank"] // world
    r["rank"] = r["rank"] % world
    r["world"] = world
    coll = (
        2 * (world - 1) / world * r["grad_bytes"] / (r["busbw_gbps"] * 1e9) + 30e-6
        if world > 1
        else 0.0
    )
    slowest = r.groupby(["run", "step"])["compute_s"].transform("max")
    r["collective_s"] = coll
    r["collective_wait_s"] = slowest - r["compute_s"] + coll
    r["step_s"] = slowest + coll + r["optimizer_s"]
    return r


def run_summaries(ranks: pd.DataFrame) -> dict[tuple[str, int], tuple[pd.DataFrame, pd.Series]]:
    """(run, world) -> (step table, summary row) of every run in `ranks`, at its own plan's world."""
    out = {}
    for run, d in ranks.groupby("run"):
        st = step_table(ranks[ranks["run"] == run], keys=["run"])
        out[(run, int(d["world"].iloc[0]))] = (st, summary_table(st, keys=["run"]).iloc[0])
    return out


def _p5(d: dict) -> np.ndarray:
    return np.percentile(d["tokens"] / d["step_s"], 5, axis=-1)


def _thr(d: dict) -> np.ndarray:
    return d["tokens"].sum(-1) / d["step_s"].sum(-1)


# statistic(base, new) over per-step columns shaped (..., steps); the ledger's definitions
STATS = {
    "throughput_gain": lambda a, b: 100 * (_thr(b) / _thr(a) - 1),
    "cv_reduction": lambda a, b: 100 * (1 - b["rank_cv"].mean(-1) / a["rank_cv"].mean(-1)),
    "rank_cv": lambda a, b: 100 * b["rank_cv"].mean(-1),
    "step_cv": lambda a, b: 100 * b["step_s"].std(-1) / b["step_s"].mean(-1),
    "floor_gain": lambda a, b: 100 * (_p5(b) / _p5(a) - 1),
    "peak_gain": lambda a, b: 100 * (b["peak"].mean(-1) / a["peak"].mean(-1) - 1),
    "peak_reserved_gain": lambda a, b: 100 * (b["reserved"].mean(-1) / a["reserved"].mean(-1) - 1),
}


_COLUMNS = {"tokens": "tokens", "step_s": "step_s", "rank_cv": "rank_cv"}
_COLUMNS |= {"peak": "peak_mem_bytes", "reserved": "peak_reserved_bytes"}


def _columns(st: pd.DataFrame) -> dict[str, np.ndarray]:
    """A step table's columns that STATS read, in step order."""
    st = st.sort_values("step")
    return {k: st[c].to_numpy(float) for k, c in _COLUMNS.items() if c in st.columns}


def throughput_gain(a: pd.DataFrame, b: pd.DataFrame, seed: int = 0, paired: bool = False):
    """(gain %, CI low, CI high) of throughput of step table b over a."""
    f = STATS["throughput_gain"]
    return bootstrap_runs(f, _columns(a), _columns(b), paired=paired, seed=seed, n_resamples=N_BOOT)


def paired_runs(ranks: pd.DataFrame, a: str, b: str) -> bool:
    """Runs a and b are paired units when they trained the same batches at every step and rank."""
    return same_batches(ranks[ranks["run"] == a], ranks[ranks["run"] == b])


def compare(summ: dict, base, new, stat: str, paired: bool) -> tuple[float, float, float]:
    """(value, CI low, CI high) of STATS[stat] of run-and-world key `new` over `base` (keys of
    `run_summaries`); the CI resamples steps (paired: the same step indices from both runs)."""
    a, b = _columns(summ[base][0]), _columns(summ[new][0])
    return bootstrap_runs(STATS[stat], a, b, paired=paired, n_resamples=N_BOOT)


def pairing_note(paired: bool) -> str:
    """How a comparison's interval was drawn, for a metric's conditions."""
    return "CI paired over steps (same batches)" if paired else "CI over each run's steps"
