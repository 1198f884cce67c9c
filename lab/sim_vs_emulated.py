"""Which step model makes the balance simulator predict the emulated training runs: simulate a
run's own policies (its training_info: M_mem, M_comp, p; the global planner on the power law)
with each candidate step model as the truth, and put the simulated gains beside the run's
emulated ones (claims C7, C8, C9 and issue 7's global policy).

    PYTHONPATH=. python lab/sim_vs_emulated.py reports/reference/h200/quick-5753865 [--out FILE.csv]

Step models: the sweep's power law (costmodel_fit, what balance simulated with until d45682e),
the sweep's quadratic fit (costmodel_quadratic, what it simulates with since), and the
validation's quadratic refit on the emulated rank-batches (validation/refits.csv, the best the
run's own steps allow). Simulated: 1000 steps, per-sample noise CV 5% (the balance experiment's),
seed 0. CPU, seconds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from suite.balance.buckets import bucket_table
from suite.balance.fit_table import model_from_fit
from suite.balance.global_policy import GlobalPolicy
from suite.balance.policies import DualConstraint, EqualToken
from suite.balance.simulator import NOISE_CV, SimConfig, simulate
from suite.data.corpus import sample_corpus
from suite.experiments.balance.runs import CORPUS_SIZE
from suite.experiments.balance.summary import step_metrics
from suite.experiments.costmodel import model_from_quadratic, run_quadratic
from suite.rundir import RunDir

# (metric in metrics.csv, emulated run pair, mix, ranks)
GAINS = [
    ("throughput_gain_16_emulated", "dual", "default", 16, "throughput"),
    ("throughput_gain_8_emulated", "dual", "default", 8, "throughput"),
    ("throughput_gain_global_16_emulated", "global", "default", 16, "throughput"),
    ("floor_gain_emulated", "dual", "long-video", 16, "floor_p5"),
]


def simulated_gains(info: pd.Series, power, truth, steps: int = 1000, seed: int = 0) -> dict:
    m_mem, p = float(info.m_mem), float(info.p)
    m_comp = {"default": float(info.m_comp)}
    m_comp["long-video"] = float(info.get("m_comp_long", info.m_comp))
    if pd.isna(m_comp["long-video"]):
        m_comp["long-video"] = float(info.m_comp)
    out = {}
    for metric, policy, mix, ranks, key in GAINS:
        buckets = bucket_table(sample_corpus(CORPUS_SIZE, mix, seed=seed).tokens)
        pols = {
            "equal-token": EqualToken(m_tok=m_mem),
            "dual": DualConstraint(m_mem=m_mem, m_comp=m_comp[mix], p=p),
            "global": GlobalPolicy(m_mem=m_mem, planner=power),
        }
        cfg = SimConfig(ranks=ranks, steps=steps, noise_cv=NOISE_CV, seed=seed)
        base = step_metrics(simulate(buckets, pols["equal-token"], truth, cfg).step_frame())
        new = step_metrics(simulate(buckets, pols[policy], truth, cfg).step_frame())
        out[metric] = 100 * (new[key] / base[key] - 1)
    return out


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "run", type=Path, help="a run directory with results/, metrics.csv, validation/"
    )
    ap.add_argument("--out", type=Path, help="write the table as CSV here")
    args = ap.parse_args(argv)
    rd = RunDir(args.run)
    info = rd.read_table("training_info").iloc[0]
    power = model_from_fit(rd.read_table("costmodel_fit"))
    models = {"costmodel_fit (power law)": power}
    quad = run_quadratic(rd)
    if quad is not None:
        models["costmodel_quadratic"] = quad
    refits = args.run / "validation" / "refits.csv"
    if refits.is_file():
        r = pd.read_csv(refits).set_index("model").loc[["refit_quadratic"]]
        models["validation refit_quadratic"] = model_from_quadratic(r, "refit")
    metrics = pd.read_csv(args.run / "metrics.csv").set_index("metric")
    rows = []
    for name, truth in models.items():
        for metric, value in simulated_gains(info, power, truth).items():
            emu = metrics.loc[metric] if metric in metrics.index else None
            rows.append(
                {
                    "step_model": name,
                    "metric": metric,
                    "simulated_pct": round(value, 2),
                    "emulated_pct": None if emu is None else round(float(emu["value"]), 2),
                    "emulated_ci_low": None if emu is None else emu["ci_low"],
                    "emulated_ci_high": None if emu is None else emu["ci_high"],
                }
            )
    table = pd.DataFrame(rows)
    table["abs_error_pts"] = (table.simulated_pct - table.emulated_pct).abs().round(2)
    print(f"{args.run}: M_mem {info.m_mem:.0f}, s_cross {info.s_cross:.0f}, p {info.p:.3f}")
    print(table.to_string(index=False))
    print(table.groupby("step_model", sort=False).abs_error_pts.mean().round(2).to_string())
    if args.out:
        table.to_csv(args.out, index=False)
    return table


if __name__ == "__main__":
    main()
