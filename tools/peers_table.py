"""Predicted rank balance of every policy, the peers (suite.balance.peers) beside the suite's own,
from their plans priced by the cost model: each micro-batch costs cost.predict(B, S), a rank's
compute is the sum over its micro-batches (suite.balance.peers.predicted_rank_loads).

    PYTHONPATH=. python tools/peers_table.py [--ranks 16,1024] [--steps 300,40] [--price fit|analytic]
        [--out FILE.csv]

Per policy and rank count: rank CV (population std / mean of the ranks' compute in a step) and
max/mean, each as the mean and the p99 over steps; the step-time CV across steps (step time = the
slowest rank); VideoSys's imbalance mean((max - t) / max); planner seconds per step (building the
whole plan / its steps, one core). Default mix, default_cost_model(), seed 0. No noise, no
collectives: the spread the plans themselves give. --price analytic prices the same plans (the
policies still decide with the fit) by the analytic Wan-14B model the fit approximates
(costmodel.analytic_seconds: 0.3 s fixed per batch where the power-law fit has a = 6.2 s), to
show how much of a packer's spread is the fit's per-batch fixed cost.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import pandas as pd

from suite.balance.buckets import bucket_table
from suite.balance.costmodel import (
    WAN14B_FIXED_S,
    WAN14B_FLOPS,
    WAN14B_FLOPS_PER_S,
    QuadraticCost,
    default_cost_model,
)
from suite.balance.peers import predicted_rank_loads, videosys_imbalance
from suite.balance.plan import plan_steps
from suite.balance.registry import POLICIES, Budgets, PolicyInputs, make_policy
from suite.data.corpus import sample_corpus


def policies(cost, tokens):
    """Every registry policy under the cost's M_mem and p; dual's s_cross tuned on its step model."""
    b = Budgets(cost.m_mem, math.inf, cost.p, cost.source)
    inputs = PolicyInputs(b, bucket_table(tokens), cost)
    return {n: make_policy(n, inputs) for n in POLICIES}


def analytic_price() -> QuadraticCost:
    """costmodel.analytic_seconds as a cost model: 0.3 s + B * (84e9 S + 3.5e6 S^2) / 4e14."""
    lin, att = WAN14B_FLOPS
    f = WAN14B_FLOPS_PER_S
    return QuadraticCost(a=WAN14B_FIXED_S, c=0.0, b=lin / f, d=att / f, source="analytic")


def measure(name, pol, tokens, cost, price, ranks: int, steps: int) -> dict:
    t0 = time.perf_counter()
    plan = plan_steps(pol, tokens, ranks, steps, seed=0)
    planner_s = (time.perf_counter() - t0) / plan.steps
    plan.check(tokens, max_tokens=cost.m_mem)
    loads = predicted_rank_loads(plan, tokens, price)
    mean = loads.mean(axis=1)
    cv, mm = loads.std(axis=1) / mean, loads.max(axis=1) / mean
    step_t = loads.max(axis=1)
    return {
        "policy": name,
        "ranks": ranks,
        "steps": plan.steps,
        "rank_cv_mean": cv.mean(),
        "rank_cv_p99": np.percentile(cv, 99),
        "maxmean_mean": mm.mean(),
        "maxmean_p99": np.percentile(mm, 99),
        "step_cv": step_t.std() / step_t.mean(),
        "videosys_imbalance": videosys_imbalance(plan, tokens, price).mean(),
        "tokens_per_s": plan.table(tokens)["tokens"].sum() / step_t.sum(),
        "planner_s_per_step": planner_s,
    }


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ranks", default="16,1024", help="comma-separated rank counts")
    ap.add_argument("--steps", default="300,40", help="steps per rank count (same order)")
    ap.add_argument(
        "--samples", type=int, help="corpus size (default: 1.2 x what the steps take at M_mem/rank)"
    )
    ap.add_argument("--price", choices=("fit", "analytic"), default="fit", help="what prices B, S")
    ap.add_argument("--out", help="write the table as CSV here")
    args = ap.parse_args(argv)
    ranks = [int(r) for r in args.ranks.split(",")]
    steps = [int(s) for s in args.steps.split(",")]
    if len(steps) != len(ranks):
        ap.error(f"--steps needs one value per rank count: {len(ranks)} ranks, {len(steps)} steps")
    cost = default_cost_model()
    price = cost if args.price == "fit" else analytic_price()
    mean_s = float(sample_corpus(100_000, seed=0)["tokens"].mean())
    rows = []
    for R, n in zip(ranks, steps):
        size = args.samples or int(1.2 * n * R * cost.m_mem / mean_s)
        tokens = sample_corpus(size, seed=0)["tokens"].to_numpy()
        pols = policies(cost, tokens)
        for i, (name, pol) in enumerate(pols.items(), 1):
            print(f"[{R} ranks] {i}/{len(pols)} {name}", flush=True)
            row = measure(name, pol, tokens, cost, price, R, n)
            rows.append({"price": args.price, "samples": size} | row)
    df = pd.DataFrame(rows)
    if args.out:
        df.to_csv(args.out, index=False)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(df.round(4).to_string(index=False))
    return df


if __name__ == "__main__":
    main()
