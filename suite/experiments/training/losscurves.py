"""C15's loss-curve metrics from the training experiment's loss runs (table training_loss).

Every comparison is against the equal-token run with the Wan-path AdaLN of the same seed, on
10-step moving averages of runs with that seed and data: `max` is the largest relative gap over
the steps (numerics: same batches), `final` the gap at the last step (policies: different
batches, so only where they end up); policy rows also say how many tokens each run trains per
step.

Seeds (column `seed`, the training profile's `loss_seeds`): seed k is another draw of data
order, initial weights and noise; the runs of one seed are paired. With n >= 2 seeds a row's
value is the mean of the n per-seed statistics and its 95% interval a Student-t interval over
them (n - 1 degrees of freedom): the stated model is that seeds are independent draws of the
statistic, so the interval says what another seed could give; the conditions name n and the
per-seed values.

With one seed (or a table without the column: the committed references) a `max` row's 95%
interval is a percentile bootstrap over steps of the per-step gap (the steps are the only
replicated units): its low end says how much the max rests on a few steps; its high end is the
observed max (no resample exceeds it), so it does not bound what another seed would give. A
one-seed `final` row is one step's gap: no interval.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from suite.stats import bootstrap_ci, t_interval

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
BOOT = "95% CI: percentile bootstrap over steps of the per-step gap"
DEGENERATE = "DEGENERATE: both policies gave identical batches"


def moving_average(x: pd.Series, w: int = 10) -> np.ndarray:
    return x.rolling(w, min_periods=1).mean().to_numpy()


def same_batches(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """True when two runs trained on batches of identical tokens at every step and rank."""
    cols = [c for c in ("step", "rank", "tokens") if c in a.columns]
    ka = a[cols].sort_values(cols[:-1]).to_numpy()
    kb = b[cols].sort_values(cols[:-1]).to_numpy()
    return ka.shape == kb.shape and bool((ka == kb).all())


def seed_stats(loss: pd.DataFrame) -> dict[str, dict]:
    """One seed's statistic (value, bootstrap CI of a max, steps, identical batches) per
    comparison whose two runs the table holds."""
    runs = {r: d.sort_values("step") for r, d in loss.groupby("run")}
    if BASE not in runs:
        return {}
    curves = {r: moving_average(d.loss.reset_index(drop=True)) for r, d in runs.items()}
    a = curves[BASE]
    out = {}
    for metric, run, stat, _ in COMPARISONS:
        if run not in curves:
            continue
        gaps = 100 * np.abs(curves[run] - a) / a
        lo = hi = math.nan
        if stat == "final":
            gap = float(gaps[-1])
        elif len(gaps) < 2:
            gap = float(gaps.max())
        else:
            gap, lo, hi = bootstrap_ci([gaps], np.max, seed=0)
        out[metric] = {
            "value": gap,
            "ci_low": lo,
            "ci_high": hi,
            "steps": len(a),
            "degenerate": stat == "final" and same_batches(runs[run], runs[BASE]),
        }
    return out


def loss_rows(loss: pd.DataFrame | None, dim, layers, model: str = "") -> list[dict]:
    """Metric rows (claim C15) of the comparisons whose two runs are in `loss` (in one seed at
    least); `model` names what trained (architecture, checkpointing, dtype) in their conditions."""
    if loss is None or loss.empty:
        return []
    seeds = loss.groupby("seed") if "seed" in loss.columns else [(None, loss)]
    by_seed = {s: seed_stats(d) for s, d in seeds}
    layers = int(loss["layers"].iloc[0]) if "layers" in loss.columns else layers
    tokens = loss.groupby("run").tokens.mean() if "tokens" in loss.columns else {}
    rows = []
    for metric, run, stat, what in COMPARISONS:
        got = {s: st[metric] for s, st in by_seed.items() if metric in st}
        if not got:
            continue
        first = next(iter(got.values()))
        where = f"D={dim} L={layers}" + (f", {model}" if model else "")
        if len(got) == 1:  # one seed: as the single-seed runs always read
            value, lo, hi = first["value"], first["ci_low"], first["ci_high"]
            spread = [] if stat == "final" else [BOOT]
            degenerate = [DEGENERATE] if first["degenerate"] else []
            common = f"{first['steps']} steps, 10-step moving average, same seed and data"
        else:
            value, lo, hi = t_interval([g["value"] for g in got.values()])
            each = ", ".join(f"{g['value']:.3g}" for g in got.values())
            spread = [
                f"mean over {len(got)} seeds (per seed: {each}); 95% CI: Student-t over the "
                "seeds, taken as independent draws of data order, initial weights and noise"
            ]
            same = [str(s) for s, g in got.items() if g["degenerate"]]
            degenerate = [f"{DEGENERATE} (seed {', '.join(same)})"] if same else []
            common = (
                f"{first['steps']} steps, 10-step moving average, each gap within one seed "
                "(same seed and data)"
            )
        notes = [*degenerate, what, *spread]
        if stat == "final":  # a policy: different batches of the same data
            notes.append(
                f"mean tokens per step {tokens[run]:.0f} vs {tokens[BASE]:.0f}"
                if run in tokens and BASE in tokens
                else "tokens per step not logged"
            )
        rows.append(
            {
                "claim": "C15",
                "metric": metric,
                "value": value,
                "ci_low": lo,
                "ci_high": hi,
                "unit": "%",
                "evidence": "training_loss; figure training_loss",
                "conditions": "; ".join([*notes, f"{common}, S <= 7800, {where}"]),
            }
        )
    return rows
