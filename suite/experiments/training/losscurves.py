"""C15's loss-curve metrics from the training experiment's loss runs (table training_loss).

Every comparison is against the equal-token run with the Wan-path AdaLN, on 10-step moving
averages of runs with the same seed and data: `max` is the largest relative gap over the steps
(numerics: same batches), `final` the gap at the last step (policies: different batches, so
only where they end up); policy rows also say how many tokens each run trains per step.

A `max` row's 95% interval is a percentile bootstrap over steps of the per-step gap (the runs
have one seed, so the steps are the only replicated units): its low end says how much the max
rests on a few steps; its high end is the observed max (no resample exceeds it), so it does not
bound what another seed would give. A `final` row is one step's gap: no interval.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from suite.stats import bootstrap_ci

BASE = "equal-token/wan"
# metric, run, statistic, what is compared
COMPARISONS = [
    ("loss_max_rel_diff", "equal-token/fused", "max", "fused vs Wan-path AdaLN"),
    (
        "loss_final_rel_diff_policy",
        "dual/wan",
        "final",
        "dual vs equal-token (batches of the same data)",
    ),
    (
        "loss_final_rel_diff_global",
        "global/wan",
        "final",
        "global policy (micro-batches, gradient accumulation, loss normalised by the step's "
        "tokens) vs equal-token",
    ),
]


def moving_average(x: pd.Series, w: int = 10) -> np.ndarray:
    return x.rolling(w, min_periods=1).mean().to_numpy()


def same_batches(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """True when two runs trained on batches of identical tokens at every step and rank."""
    cols = [c for c in ("step", "rank", "tokens") if c in a.columns]
    ka = a[cols].sort_values(cols[:-1]).to_numpy()
    kb = b[cols].sort_values(cols[:-1]).to_numpy()
    return ka.shape == kb.shape and bool((ka == kb).all())


def loss_rows(loss: pd.DataFrame | None, dim, layers, model: str = "") -> list[dict]:
    """Metric rows (claim C15) of the comparisons whose two runs are in `loss`; `model` names what
    trained (architecture, checkpointing, dtype) in their conditions."""
    if loss is None or loss.empty:
        return []
    runs = {r: d.sort_values("step") for r, d in loss.groupby("run")}
    if BASE not in runs:
        return []
    curves = {r: moving_average(d.loss.reset_index(drop=True)) for r, d in runs.items()}
    layers = int(loss["layers"].iloc[0]) if "layers" in loss.columns else layers
    common = (
        f"{len(curves[BASE])} steps, 10-step moving average, same seed and data, S <= 7800, "
        f"D={dim} L={layers}" + (f", {model}" if model else "")
    )
    boot = "95% CI: percentile bootstrap over steps of the per-step gap"
    tokens = loss.groupby("run").tokens.mean() if "tokens" in loss.columns else {}
    a = curves[BASE]
    rows = []
    for metric, run, stat, what in COMPARISONS:
        if run not in curves:
            continue
        b = curves[run]
        gaps = 100 * np.abs(b - a) / a
        lo = hi = math.nan
        if stat == "final":
            gap = float(gaps[-1])
        elif len(gaps) < 2:
            gap = float(gaps.max())
        else:
            gap, lo, hi = bootstrap_ci([gaps], np.max, seed=0)
        notes = [what] if stat == "final" else [what, boot]
        if stat == "final":  # a policy: different batches of the same data
            if same_batches(runs[run], runs[BASE]):
                notes.insert(0, "DEGENERATE: both policies gave identical batches")
            notes.append(
                f"mean tokens per step {tokens[run]:.0f} vs {tokens[BASE]:.0f}"
                if run in tokens and BASE in tokens
                else "tokens per step not logged"
            )
        rows.append(
            {
                "claim": "C15",
                "metric": metric,
                "value": gap,
                "ci_low": lo,
                "ci_high": hi,
                "unit": "%",
                "evidence": "training_loss; figure training_loss",
                "conditions": "; ".join([*notes, common]),
            }
        )
    return rows
