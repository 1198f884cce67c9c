"""Forecast quality at scale: each policy's rank CV and throughput at the forecast's automatic
step count beside a long run (the forecast's former default of 1000 steps), with 95% intervals.

    PYTHONPATH=. python lab/balance/forecast_scale.py --manifest M.csv --cost COST.json \
        --gpus 1024 [--ref-steps 1000] [--policies a,b] [--out FILE.csv]

Both runs go through `simulate` exactly as `suite forecast` does (same seed, config and cost).
Interval: batch means over 10 consecutive blocks of steps (rank CV: the mean of the per-step
CVs; throughput: tokens / seconds of each block), mean +- t(0.975, 9) x sd / sqrt(10). One row
per (policy, steps): metric, interval, seconds the simulation took on this machine.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from scipy import stats

from suite.balance.cli import _buckets, _load_cost
from suite.balance.registry import POLICIES, PolicyInputs, make_policy
from suite.balance.simulator import SimConfig, auto_steps, simulate

BLOCKS = 10


def intervals(res) -> dict[str, float]:
    """Point values (as `metrics`) and batch-means 95% half-widths of rank_cv and throughput."""
    c = res.compute
    cv = c.std(axis=1) / c.mean(axis=1)
    tok, sec = res.tokens.sum(axis=1), res.step_s
    blocks = np.array_split(np.arange(len(sec)), BLOCKS)
    t = stats.t.ppf(0.975, BLOCKS - 1) / np.sqrt(BLOCKS)
    cv_b = np.array([cv[b].mean() for b in blocks])
    thr_b = np.array([tok[b].sum() / sec[b].sum() for b in blocks])
    return {
        "rank_cv": float(cv.mean()),
        "rank_cv_hw": float(t * cv_b.std(ddof=1)),
        "throughput": float(tok.sum() / sec.sum()),
        "throughput_hw": float(t * thr_b.std(ddof=1)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--cost", required=True)
    ap.add_argument("--gpus", type=int, required=True)
    ap.add_argument("--ref-steps", type=int, default=1000)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--out", default="forecast_quality.csv")
    a = ap.parse_args()
    cost = _load_cost(a.cost)
    buckets, _ = _buckets(a.manifest, "default", 0)
    auto = auto_steps(buckets, cost.m_mem, a.gpus)
    rows = []
    for name in a.policies.split(","):
        pol = make_policy(name, PolicyInputs.from_cost(cost, buckets))
        for steps in (auto, a.ref_steps):
            cfg = SimConfig(ranks=a.gpus, steps=steps, optimizer_s=cost.optimizer_s)
            t0 = time.perf_counter()
            res = simulate(buckets, pol, cost.step_model(), cfg)
            took = time.perf_counter() - t0
            rows.append(
                {"policy": name, "ranks": a.gpus, "steps": steps, **intervals(res), "sim_s": took}
            )
            print(rows[-1], flush=True)
            pd.DataFrame(rows).to_csv(a.out, index=False)


if __name__ == "__main__":
    main()
