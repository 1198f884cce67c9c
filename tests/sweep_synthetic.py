"""Synthetic shape sweeps of an H200-like step with a launch floor: the step's GPU work is
a + c*B + b*B*S + d*B*S^2 (the full H200 reference's form without its launch-bound shapes) and a
step takes max(launch floor, work) (tests of launch-bound detection and held-out validation)."""

import numpy as np
import pandas as pd

from suite.experiments.costmodel.sweep import M_TOK

WORK = {"a": 0.054, "c": 0.0019, "b": 3.07e-5, "d": 1.5e-9}


def work(B, S):
    B, S = np.asarray(B, float), np.asarray(S, float)
    return WORK["a"] + B * (WORK["c"] + WORK["b"] * S + WORK["d"] * S**2)


def floored_sweep(shapes, floor=0.22, repeats=3, noise=0.005, seed=0) -> pd.DataFrame:
    """shapes_sweep rows: max(floor, work) x lognormal noise; `floor` a number or a function of
    the rng drawing one per step (a bimodal host)."""
    rng = np.random.default_rng(seed)
    rows = []
    for B, S in shapes:
        for r in range(repeats):
            h = floor(rng) if callable(floor) else floor
            t = max(h, float(work(B, S))) * rng.lognormal(0, noise)
            rows.append({"B": B, "S": S, "repeat": r, "step_s": t})
    df = pd.DataFrame(rows)
    df["tokens"], df["bs2"] = df["B"] * df["S"], df["B"] * df["S"] ** 2
    return df.assign(
        peak_mem_bytes=1e9 + 4e3 * df["tokens"], device="synthetic", model="wan-1.3b", m_tok=M_TOK
    )
