"""Why the dual-constraint policy gained little in a run: simulate its batch sizes for a range of
crossover lengths s_cross against equal-token, with the step model that predicts the run's
measured steps best (its validation's quadratic refit on the emulated rank-batches) as the truth.

    PYTHONPATH=. python lab/dual_gap.py reports/reference/h200/quick-5753865 [--mix long-video] [--out FILE.csv]
        [--windows 1000 [--window-steps 8] [--window-s-cross 9360,28800] [--below 12.5]] [--replay]

Rows: the rule B = min(M_mem/S, M_comp/S^p) with the run's p at each candidate s_cross (the one the
run used is marked), the same rule with a quadratic compute budget (B*(c + b*S + d*S^2) <= K,
crossing the memory budget at s_cross), and the s_cross each step model would choose
(suite.balance.simulator.tune_s_cross): the power law (what the run used) and the sweep's
quadratic fit (what training uses since this analysis). CPU, seconds. --windows: also the spread
of the gain over that many short windows (as many steps as a quick training run), each with its
own seed, at the run's s_cross and at the candidates the step models choose. --replay: the run's
own dual and equal-token rank-batches (results/training_ranks.csv) through the same step model
(slowest rank + the measured collective and optimizer times per step), the gain they give.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from suite.balance.costmodel import QuadraticCost
from suite.balance.fit_table import model_from_fit
from suite.balance.policies import DualConstraint, EqualToken
from suite.balance.simulator import SimConfig, simulate, tune_s_cross
from suite.experiments.costmodel import model_from_quadratic


class QuadraticBudget:
    """B = max(1, min(floor(M_mem / S), floor(K / (c + b*S + d*S^2))))."""

    name = "quadratic budget"

    def __init__(self, m_mem: float, k: float, cost: QuadraticCost):
        self.m_mem, self.k, self.cost = m_mem, k, cost

    def batch_size(self, S):
        S = np.asarray(S, float)
        mem = np.floor(self.m_mem / S)
        comp = np.floor(self.k / self.cost.sample_cost(S))
        return np.maximum(1, np.minimum(mem, comp)).astype(np.int64)

    def epoch_plan(self, tokens, world: int, seed: int, epoch: int):
        """The bucket sampler's plan of these batch sizes (what the simulator costs)."""
        from suite.balance.plan import bucket_epoch_plan

        return bucket_epoch_plan(tokens, self.batch_size, world, seed, epoch, self.name)


def replay_gain(res: Path, truth, mix: str) -> float:
    """The dual run's throughput gain over equal-token, % (mix's wan runs), replaying the
    batches they trained through `truth`."""
    ranks = pd.read_csv(res / "training_ranks.csv")

    def throughput(policy: str) -> float:
        r = ranks[ranks.run == f"{mix}/{policy}/wan"]
        pred = pd.Series(truth.predict(r.B.to_numpy(), r.S.to_numpy()), index=r.index)
        steps = r.assign(pred=pred).groupby("step")
        time = steps.pred.max() + steps.collective_s.first() + steps.optimizer_s.first()
        return r.tokens.sum() / time.sum()

    return 100 * (throughput("dual") / throughput("equal-token") - 1)


def window_spread(buckets, truth, m_mem, p, ranks, args, s_crosses) -> pd.DataFrame:
    """The dual rule's gain over equal-token in short windows (seeds 0..windows-1, the same seed
    for both policies): its 5th, 50th and 95th percentiles per s_cross."""
    rows = []
    for s in sorted(s_crosses):
        dual = DualConstraint(m_mem=m_mem, m_comp=m_mem * s ** (p - 1), p=p)
        gains = []
        for seed in range(args.windows):
            cfg = SimConfig(ranks=ranks, steps=args.window_steps, noise_cv=0.05, seed=seed)
            eq = simulate(buckets, EqualToken(m_mem), truth, cfg).metrics()["throughput"]
            gains.append(
                100 * (simulate(buckets, dual, truth, cfg).metrics()["throughput"] / eq - 1)
            )
        q5, q50, q95 = np.percentile(gains, [5, 50, 95])
        below = (
            {} if args.below is None else {"share_below": np.mean(np.array(gains) <= args.below)}
        )
        rows.append(
            {
                "s_cross": s,
                "windows": args.windows,
                "steps": args.window_steps,
                "gain_p5": q5,
                "gain_p50": q50,
                "gain_p95": q95,
                **below,
            }
        )
    return pd.DataFrame(rows).round(3)


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("run", type=Path, help="a run directory with results/ and validation/")
    ap.add_argument("--out", type=Path, help="write the table as CSV here")
    ap.add_argument("--steps", type=int, default=2000, help="simulated steps per policy")
    ap.add_argument("--windows", type=int, default=0, help="short windows to simulate (0: none)")
    ap.add_argument("--window-steps", type=int, default=8, help="steps per window")
    ap.add_argument(
        "--window-s-cross",
        help="comma-separated s_cross values for the windows (default: the run's and the chosen)",
    )
    ap.add_argument("--replay", action="store_true", help="also the run's own batches' gain")
    ap.add_argument(
        "--below", type=float, help="also the share of windows at or below this gain %%"
    )
    ap.add_argument(
        "--mix",
        default="default",
        choices=("default", "long-video"),
        help="whose buckets (results/balance_buckets.csv): the default mix, or the long-video "
        "mix of C9 (the s_cross each step model would choose for that mix alone)",
    )
    args = ap.parse_args(argv)
    res = args.run / "results"
    info = pd.read_csv(res / "training_info.csv").iloc[0]
    ranks = int(info.ranks)
    m_mem, p, used = float(info.m_mem), float(info.p), float(info.s_cross)
    if args.mix == "long-video" and pd.notna(info.get("s_cross_long")):
        used = float(info.s_cross_long)  # the long-video pair tunes its own (752c37b)
    refits = pd.read_csv(args.run / "validation" / "refits.csv").set_index("model")
    truth = model_from_quadratic(refits.loc[["refit_quadratic"]], "validation refit_quadratic")
    buckets = pd.read_csv(res / "balance_buckets.csv")
    buckets = buckets[(buckets.mix == args.mix) & (buckets.policy == "dual")][["S", "share"]]
    buckets = buckets.reset_index(drop=True)
    cfg = SimConfig(ranks=ranks, steps=args.steps, noise_cv=0.05, seed=3)
    base = simulate(buckets, EqualToken(m_mem), truth, cfg).metrics()

    def row(policy, rule, s_cross, note=""):
        m = simulate(buckets, policy, truth, cfg).metrics()
        gain = 100 * (m["throughput"] / base["throughput"] - 1)
        return {
            "rule": rule,
            "s_cross": s_cross,
            "gain_pct": gain,
            "rank_cv": m["rank_cv"],
            "note": note,
        }

    power = model_from_fit(pd.read_csv(res / "costmodel_fit.csv"))
    chosen = {"power law (costmodel_fit)": tune_s_cross(buckets, power, m_mem, p=p)[0]}
    quad_path = res / "costmodel_quadratic.csv"
    if quad_path.is_file():
        sweep_q = model_from_quadratic(pd.read_csv(quad_path))
        chosen["quadratic (costmodel_quadratic)"] = tune_s_cross(buckets, sweep_q, m_mem, p=p)[0]
    cands = sorted({7800.0, 14040.0, 20280.0, 28800.0, 36000.0, 50400.0, used, *chosen.values()})
    rows = []
    for s in cands:
        notes = [f"chosen by {k}" for k, v in chosen.items() if v == s]
        if s == used:
            notes.append("the run's")
        dual = DualConstraint(m_mem=m_mem, m_comp=m_mem * s ** (p - 1), p=p)
        rows.append(row(dual, f"dual p={p:.2f}", s, "; ".join(notes)))
    for s in cands:
        k = m_mem / s * float(truth.sample_cost(s))
        rows.append(row(QuadraticBudget(m_mem, k, truth), "quadratic budget", s))
    table = pd.DataFrame(rows)
    print(
        f"{args.run}, {args.mix} mix: {ranks} ranks, M_mem {m_mem:.0f}, p {p:.3f}; "
        "truth: validation refit_quadratic"
    )
    print(f"equal-token: rank CV {base['rank_cv']:.3f}, {base['throughput']:.0f} tokens/s")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if args.out:
        table.to_csv(args.out, index=False)
    if args.replay:
        print(
            f"replayed {args.mix} dual vs equal-token batches: {replay_gain(res, truth, args.mix):+.1f}%"
        )
    if args.windows:
        ws = {used, *chosen.values()}
        if args.window_s_cross:
            ws = {float(v) for v in args.window_s_cross.split(",")}
        print(window_spread(buckets, truth, m_mem, p, ranks, args, ws).to_string(index=False))
    return table


if __name__ == "__main__":
    main()
