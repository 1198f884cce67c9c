"""Per-rank JSONL logs -> tidy pandas tables.

rank table: one row per (run, step, rank) with the LOG_FIELDS of suite.train.instrument.
step table: one row per (run, step): the synchronous step as the slowest rank sees it.
    step_s            max over ranks of step_s (the real step, or the emulator's composed one)
    compute_max_s, compute_mean_s, rank_cv (std/mean over ranks, population std), maxmean, bubble
    tokens, samples   summed over ranks (latent tokens, no padding)
    throughput        tokens / step_s (global tokens per second)
    peak_mem_bytes    max over ranks; loss = mean over ranks
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

RUN_KEYS = ["policy", "adaln", "world", "emulated"]


def read_logs(out_dir: str | Path) -> pd.DataFrame:
    """Every rank*.jsonl under out_dir, concatenated and sorted by (step, rank)."""
    rows = []
    for p in sorted(Path(out_dir).glob("rank*.jsonl")):
        rows += [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    if not rows:
        raise FileNotFoundError(f"no rank*.jsonl logs under {out_dir}")
    return pd.DataFrame(rows).sort_values(["step", "rank"]).reset_index(drop=True)


def step_table(ranks: pd.DataFrame, keys: list[str] | None = None) -> pd.DataFrame:
    """Aggregate rank rows into one row per step (grouped by `keys` + step)."""
    keys = [k for k in (keys or RUN_KEYS) if k in ranks.columns]
    g = ranks.groupby(keys + ["step"], sort=True)
    out = g.agg(
        step_s=("step_s", "max"),
        compute_max_s=("compute_s", "max"),
        compute_mean_s=("compute_s", "mean"),
        compute_std_s=("compute_s", lambda x: float(np.std(x))),
        collective_wait_mean_s=("collective_wait_s", "mean"),
        optimizer_s=("optimizer_s", "max"),
        tokens=("tokens", "sum"),
        samples=("samples", "sum"),
        loss=("loss", "mean"),
        peak_mem_bytes=("peak_mem_bytes", "max"),
        peak_mem_mean_bytes=("peak_mem_bytes", "mean"),
        peak_reserved_bytes=("peak_reserved_bytes", "max"),
        ranks=("rank", "count"),
    ).reset_index()
    out["rank_cv"] = out.compute_std_s / out.compute_mean_s
    out["maxmean"] = out.compute_max_s / out.compute_mean_s
    out["bubble"] = 1 - out.compute_mean_s / out.compute_max_s
    out["throughput"] = out.tokens / out.step_s
    return out


def summary_table(steps: pd.DataFrame, keys: list[str] | None = None) -> pd.DataFrame:
    """One row per run: mean throughput (total tokens / total time), CVs, floor, memory."""
    keys = [k for k in (keys or RUN_KEYS) if k in steps.columns]
    rows = []
    for key, d in steps.groupby(keys, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        rows.append(
            {
                **dict(zip(keys, key)),
                "steps": len(d),
                "throughput": d.tokens.sum() / d.step_s.sum(),
                "rank_cv": d.rank_cv.mean(),
                "maxmean": d.maxmean.mean(),
                "bubble": d.bubble.mean(),
                "step_cv": d.step_s.std(ddof=0) / d.step_s.mean(),
                "step_s_mean": d.step_s.mean(),
                "floor_p5": float(np.percentile(d.tokens / d.step_s, 5)),
                "peak_mem_mean_bytes": d.peak_mem_bytes.mean(),
                "loss_final": d.loss.iloc[-1],
            }
        )
    return pd.DataFrame(rows)
