"""What `simulate` and `forecast` read and check before simulating: the cost JSON, the data
(a manifest or a synthetic mix, every sample within M_mem), a measured latency table, and how
many simulations run at once within the work limit (suite.balance.limits). Errors are
ValueErrors naming the argument or file (and line); the commands print them as one line.
"""

from __future__ import annotations

import math
import os
from dataclasses import replace

import numpy as np
import pandas as pd

from suite.balance.buckets import bucket_table
from suite.balance.costmodel import CostModel, default_cost_model
from suite.balance.limits import MAX_PLANNED, check_work, planned_samples
from suite.balance.simulator import SimConfig
from suite.rundir import read_csv

MANIFEST_HELP = (
    "CSV (header line), JSONL (one object a line) or Parquet (needs pyarrow: pip install "
    "'adaptiveload-suite[parquet]'), one sample a row, columns height, width (pixels, multiples "
    "of 16) and frames (1 + 4k; 1 for an image). Without a frames column every row is read as an "
    "image, and a note says so. A bad file, row or value stops with an error naming the file and "
    "line, and so does a sample above the cost model's M_mem (it fits no batch: drop or crop it)"
)


def load_cost(path: str | None, step_model: str = "auto") -> CostModel:
    """The --cost JSON, a run folder's cost.json (tools/run_cost.py writes it), or the default (the
    analytic Wan-14B model); it must carry M_mem; step_model "power" drops its quadratic form."""
    if path and os.path.isdir(path):  # a run folder: the cost its balance experiment used
        saved = os.path.join(path, "cost.json")
        if not os.path.isfile(saved):
            raise ValueError(
                f"{path}: a run folder needs its cost.json (python tools/run_cost.py {path})"
            )
        cost = CostModel.load(saved)
    else:
        cost = CostModel.load(path) if path else default_cost_model()
    if not math.isfinite(cost.m_mem):
        raise ValueError(f"{path}: the cost JSON has no m_mem; refit with --capacity-gb")
    if step_model == "power":  # whole steps: the optimizer is inside a, charged per batch
        return replace(cost.with_quadratic(None), optimizer_s=0.0)
    return cost


def data_buckets(
    manifest: str | None, mix: str, seed: int, m_mem: float | None = None
) -> tuple[pd.DataFrame, str]:
    """The data's bucket table and its name; with m_mem, a sample above it (it fits no batch) is
    refused: by line for a manifest, by the mix's share for a synthetic one."""
    from suite.data.corpus import sample_corpus
    from suite.data.manifest import read_manifest

    if manifest:
        df = read_manifest(manifest, max_tokens=m_mem)
        return bucket_table(df["tokens"]), f"manifest {manifest}"
    table = bucket_table(sample_corpus(100_000, mix, seed=seed)["tokens"])
    over = table[table["S"] > m_mem] if m_mem is not None else table.iloc[:0]
    if len(over):
        raise ValueError(
            f"--mix {mix}: {over['share'].sum():.1%} of its samples are above M_mem = "
            f"{m_mem:,.0f} tokens (up to {over['S'].max():,}), the most one batch holds: "
            "use a cost model with a larger M_mem (fit-cost --capacity-gb)"
        )
    return table, f"{mix} mix"


def forecast_jobs(asked: int | None, pols: dict, buckets: pd.DataFrame, cfg: SimConfig) -> int:
    """Simulations at once: --jobs, else the cores, fewer while the largest simulations together
    would pass the work limit; every policy's simulation is checked against its share."""
    run = [p for p in pols.values() if not isinstance(p, str)]
    for pol in run:  # alone first: a simulation too large for any --jobs names --steps / --gpus
        check_work(buckets, pol, cfg.ranks, cfg.steps)
    if asked is None:
        most = max((planned_samples(buckets, p, cfg.ranks, cfg.steps)[0] for p in run), default=1)
        asked = max(1, min(os.cpu_count() or 1, len(pols), int(MAX_PLANNED // most)))
    for pol in run:
        check_work(buckets, pol, cfg.ranks, cfg.steps, share=min(asked, len(pols)))
    return asked


def read_latency(path: str) -> pd.DataFrame:
    """The --latency table: columns B, S, step_s, step_s finite and > 0."""
    try:
        df = read_csv(path)
    except (OSError, ValueError) as e:
        raise ValueError(f"--latency {path}: cannot read it as CSV ({e})") from None
    missing = {"B", "S", "step_s"} - set(df.columns)
    if missing:
        raise ValueError(
            f"--latency {path}: missing column(s) {sorted(missing)}; needs B, S, step_s"
        )
    t = pd.to_numeric(df["step_s"], errors="coerce").to_numpy(float)
    bad = np.flatnonzero(~(np.isfinite(t) & (t > 0)))
    if len(bad):
        raise ValueError(
            f"--latency {path}:{bad[0] + 2}: step_s must be a finite number > 0, "
            f"got {df['step_s'].iloc[bad[0]]!r}"
        )
    return df
