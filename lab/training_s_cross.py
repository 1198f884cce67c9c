"""Which s_cross the training experiment's tuner picks from a run's own sweep, on a coarse grid
(12 quantiles of the bucket lengths) and on the fine geometric grid tune_s_cross uses, with the
simulated throughput of every candidate: shows whether two runs with nearly the same fit land on
different teeth of the sawtooth (and so train different dual batch tables).

    PYTHONPATH=. python lab/training_s_cross.py <run dir> [<run dir> ...] [--fine 60]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from suite.balance.buckets import bucket_table
from suite.balance.simulator import tune_s_cross
from suite.experiments.training import PROFILES, _tuning_model, memory_budget
from suite.experiments.training.common import _cost_model
from suite.rundir import RunContext, RunDir
from suite.train.data import load_corpus


def tunes(run_dir: Path, fine: int) -> pd.DataFrame:
    ctx = RunContext(run=RunDir(run_dir), profile="quick", device="cuda")
    prof = PROFILES["quick"]
    corpus = load_corpus(prof["corpus"], prof["mix"], ctx.seed)
    cm, _ = _cost_model(ctx)
    m_mem = memory_budget(cm, corpus, prof)
    model, tuned_on = _tuning_model(ctx, cm)
    buckets = bucket_table(corpus.tokens)
    rows = []
    grids = {
        "quantile-12": {"candidates": 12, "spacing": "quantile"},
        f"geometric-{fine}": {"candidates": fine},
    }
    for grid, kw in grids.items():
        best, table = tune_s_cross(buckets, model, m_mem, p=float(cm.p), **kw)
        table = table.assign(
            grid=grid, chosen=table.s_cross == best, p=float(cm.p), run=str(run_dir)
        )
        rows.append(table)
        print(f"{run_dir}: p {cm.p:.4f} on {tuned_on}, {grid}: s_cross {best:.0f}")
    return pd.concat(rows, ignore_index=True)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("runs", nargs="+", type=Path, help="run directories (with results/)")
    ap.add_argument("--fine", type=int, default=60, help="points of the fine geometric grid")
    ap.add_argument("--out", type=Path, default=None, help="write every candidate to this CSV")
    a = ap.parse_args()
    t = pd.concat([tunes(r, a.fine) for r in a.runs], ignore_index=True)
    if a.out:
        t.to_csv(a.out, index=False)


if __name__ == "__main__":
    main()
