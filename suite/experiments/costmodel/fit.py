"""The costmodel experiment's tables from a shapes_sweep (fit_tables), and the step model they
give a run (run_quadratic, run_table_cost): what balance and training simulate and tune with.

Launch-bound shapes (suite.balance.shapebench.launch_bound: predicted GPU work under 1.25x the
launch floor) are left out of every fit, the power law's p included: their time measures the
host's kernel launches, which can be bimodal on a node (a fast or a slow mode in no fixed order),
so with them the node's mode steers p. Left out rather than down-weighted: any weight keeps a
mode-dependent pull on p and the per-sample term. The quadratic form carries the launch floor
(QuadraticCost.floor_s: no step is priced under it), so it still prices those shapes. Where the
other shapes cannot determine a fit (too few, one batch size), every shape is fitted and the
fit row says so (launch_bound_shapes 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from suite.balance.buckets import bucket_table
from suite.balance.costmodel import (
    DEFAULT_SAFETY,
    WAN14B_M_MEM,
    CostModel,
    QuadraticCost,
    fit_cost,
    fit_memory,
    fit_quadratic_cost,
    loo_error_quadratic,
    memory_budget,
)
from suite.balance.shapebench import fit_rows
from suite.balance.simulator import tune_s_cross
from suite.data.corpus import sample_corpus

# what the sweep was measured on (shapes_sweep's columns; "" where an older sweep lacks one)
META_COLUMNS = [
    "device", "model", "layers", "dim", "dtype", "checkpointing", "adaln", "arch", "m_tok"
]  # fmt: skip
TABLE_COLUMNS = [
    "B", "S", "tokens", "n", "median_s", "q25_s", "q75_s", "quad_s", "quad_rel_err", "launch_bound"
]  # fmt: skip
FIT_COLUMNS = [
    "variant",
    "a",
    "a_lo",
    "a_hi",
    "b",
    "b_lo",
    "b_hi",
    "p",
    "p_lo",
    "p_hi",
    "r2",
    "loo_err",
    "n",
    "m0",
    "m1",
    "mem_r2",
    "capacity_bytes",
    "safety",
    "m_mem",
    "m_comp",
    "s_cross",
    "budget_source",
    "launch_floor_s",
    "launch_bound_shapes",
    *META_COLUMNS,
]
QUADRATIC_COLUMNS = [
    "a",
    "c",
    "b",
    "d",
    "r2",
    "loo_err",
    "resid_cv",
    "n",
    "floor_s",
    "launch_bound_shapes",
    *META_COLUMNS,
]


def capacity(ctx) -> float:
    """Device memory for M_mem: ctx.options["capacity_bytes"], else the CUDA device's, else NaN."""
    if "capacity_bytes" in ctx.options:
        return float(ctx.options["capacity_bytes"])
    if ctx.device == "cuda":
        try:
            import torch

            return float(torch.cuda.get_device_properties(0).total_memory)
        except Exception:  # no usable CUDA: fall back to the default budget
            return math.nan
    return math.nan


def fitted_sweep(sweep: pd.DataFrame) -> pd.DataFrame:
    """The shapes_sweep rows the fits take (launch-bound shapes left out: fit_rows), for any
    other refit of the sweep (a step model with the optimizer apart, a bootstrap's resamples), so
    it too prices the model's work, not the host's launches."""
    keep, _ = fit_rows(sweep["B"], sweep["S"], sweep["step_s"])
    return sweep[keep]


def fit_tables(
    sweep: pd.DataFrame, capacity_bytes: float = math.nan, seed: int = 0
) -> dict[str, pd.DataFrame]:
    """The costmodel tables from a shapes_sweep table (pure apart from the seeded tuning)."""
    need = {"B", "S", "step_s"}
    if missing := need - set(sweep.columns):
        raise ValueError(f"shapes_sweep lacks columns {sorted(missing)}; needs {sorted(need)}")
    meta = {k: (sweep[k].iloc[0] if k in sweep.columns else "") for k in META_COLUMNS}
    B, S, t = (sweep[c].to_numpy(float) for c in ("B", "S", "step_s"))
    keep, lb = fit_rows(B, S, t)
    floor, n_lb = float(lb["floor_s"].iloc[0]), int(lb["excluded"].sum())
    mem = (math.nan,) * 3
    if "peak_mem_bytes" in sweep.columns and np.isfinite(sweep["peak_mem_bytes"]).sum() >= 2:
        try:
            mem = fit_memory(B, S, sweep["peak_mem_bytes"])
        except ValueError:
            pass
    m0, m1, mem_r2 = mem
    if math.isfinite(capacity_bytes) and math.isfinite(m1) and m1 > 0:
        m_mem, source = memory_budget(m0, m1, capacity_bytes, DEFAULT_SAFETY), "memory fit"
    else:
        m_mem, source = float(WAN14B_M_MEM), "Wan-14B on H200 default (no device capacity)"
    buckets = bucket_table(sample_corpus(20_000, "default", seed=seed).tokens)
    fits, resid = [], []
    for variant, p in (("free", None), ("p2", 2.0)):
        m = fit_cost(
            B[keep], S[keep], t[keep], p=p, source=f"shapes_sweep {meta['device']} {meta['model']}"
        )
        m = CostModel(
            **{**m.__dict__, "m0": m0, "m1": m1, "mem_r2": mem_r2, "capacity_bytes": capacity_bytes}
        )
        s_cross, _ = tune_s_cross(buckets, m, m_mem)
        m = m.with_budgets(m_mem, s_cross)
        fits.append(
            {
                "variant": variant,
                "a": m.a,
                "a_lo": m.a_ci[0],
                "a_hi": m.a_ci[1],
                "b": m.b,
                "b_lo": m.b_ci[0],
                "b_hi": m.b_ci[1],
                "p": m.p,
                "p_lo": m.p_ci[0],
                "p_hi": m.p_ci[1],
                "r2": m.r2,
                "loo_err": m.loo_err,
                "n": m.n,
                "m0": m0,
                "m1": m1,
                "mem_r2": mem_r2,
                "capacity_bytes": capacity_bytes,
                "safety": DEFAULT_SAFETY,
                "m_mem": m.m_mem,
                "m_comp": m.m_comp,
                "s_cross": m.s_cross,
                "budget_source": source,
                "launch_floor_s": floor,
                "launch_bound_shapes": n_lb,
                **meta,
            }
        )
        pred = m.predict(B, S)
        resid.append(
            pd.DataFrame(
                {
                    "variant": variant,
                    "B": B.astype(int),
                    "S": S.astype(int),
                    "tokens": (B * S).astype(np.int64),
                    "bs2": B * S**2,
                    "repeat": sweep["repeat"].to_numpy() if "repeat" in sweep.columns else 0,
                    "step_s": t,
                    "pred_s": pred,
                    "resid_s": t - pred,
                    "rel_resid": t / pred - 1,
                    "launch_bound": ~keep,
                }
            )
        )
    out = {
        "costmodel_fit": pd.DataFrame(fits, columns=FIT_COLUMNS),
        "costmodel_residuals": pd.concat(resid, ignore_index=True),
        "costmodel_launch_bound": lb,
    }
    quad = quadratic_table(B[keep], S[keep], t[keep], meta | {"floor_s": floor}, n_lb)
    if quad is not None:
        out["costmodel_quadratic"] = quad
    out["costmodel_table"] = latency_table(B, S, t, quad, ~keep)
    return out


def latency_table(B, S, t, quad: pd.DataFrame | None, left_out=None) -> pd.DataFrame:
    """costmodel_table: per measured shape, the repeats' median and quartiles, the quadratic
    form's prediction and relative error there (NaN without the form), and whether the fits left
    it out as launch-bound (`left_out`, per row; default none)."""
    lb = np.zeros(len(t), bool) if left_out is None else np.asarray(left_out, bool)
    df = pd.DataFrame({"B": B.astype(int), "S": S.astype(int), "t": t, "lb": lb})
    g = df.groupby(["B", "S"])["t"]
    out = g.agg(n="size", median_s="median").reset_index()
    out["launch_bound"] = df.groupby(["B", "S"])["lb"].any().to_numpy()
    out["q25_s"], out["q75_s"] = g.quantile(0.25).to_numpy(), g.quantile(0.75).to_numpy()
    out["tokens"] = out["B"].astype(np.int64) * out["S"]
    q = model_from_quadratic(quad) if quad is not None else None
    out["quad_s"] = q.predict(out["B"], out["S"]) if q else math.nan
    out["quad_rel_err"] = out["quad_s"] / out["median_s"] - 1
    return out[TABLE_COLUMNS]


@dataclass(frozen=True)
class TableCost:
    """The per-shape latency table with the quadratic form as its interpolator: predict(B, S) is
    the measured median where the sweep timed (B, S), a + c*B + b*B*S + d*B*S^2 elsewhere. The
    cost interface of CostModel and QuadraticCost (predict, fixed_s)."""

    keys: np.ndarray  # sorted B * 2^32 + S of the measured shapes
    median_s: np.ndarray  # their medians, in the order of keys
    quad: QuadraticCost

    @property
    def fixed_s(self) -> float:
        return self.quad.a

    def predict(self, B, S) -> np.ndarray:
        B, S = np.broadcast_arrays(np.asarray(B, float), np.asarray(S, float))
        out = np.array(self.quad.predict(B, S), dtype=float)
        key = B.astype(np.int64) * 2**32 + S.astype(np.int64)
        i = np.clip(np.searchsorted(self.keys, key), 0, len(self.keys) - 1)
        hit = (self.keys[i] == key) & (B == np.round(B)) & (S == np.round(S))
        out[hit] = self.median_s[i[hit]]
        return out


def table_cost(table: pd.DataFrame, quad: QuadraticCost) -> TableCost:
    """TableCost of a costmodel_table and its quadratic form."""
    key = table["B"].to_numpy(np.int64) * 2**32 + table["S"].to_numpy(np.int64)
    order = np.argsort(key)
    return TableCost(key[order], table["median_s"].to_numpy(float)[order], quad)


def run_table_cost(run) -> TableCost | None:
    """The run's TableCost (costmodel_table + costmodel_quadratic), or None where either is
    missing: the simulator prices measured shapes as measured and the rest by the form."""
    quad = run_quadratic(run)
    try:
        table = run.read_table("costmodel_table")
    except FileNotFoundError:
        return None
    return None if quad is None or table.empty else table_cost(table, quad)


def quadratic_table(B, S, t, meta: dict, launch_bound_shapes: int = 0) -> pd.DataFrame | None:
    """The one-row costmodel_quadratic table (None when the sweep cannot determine the form);
    meta may carry floor_s, the launch floor its predictions do not go under."""
    try:
        q = fit_quadratic_cost(B, S, t)
    except ValueError:
        return None
    row = {"a": q.a, "c": q.c, "b": q.b, "d": q.d, "r2": q.r2, "floor_s": 0.0}
    row |= {"loo_err": loo_error_quadratic(B, S, t), "resid_cv": q.resid_cv, "n": q.n, **meta}
    row["launch_bound_shapes"] = launch_bound_shapes
    return pd.DataFrame([row], columns=QUADRATIC_COLUMNS)


def model_from_quadratic(table: pd.DataFrame, source: str = "costmodel_quadratic") -> QuadraticCost:
    """The QuadraticCost of the first row of a table with columns a, c, b, d (costmodel_quadratic,
    or a validation refit); ValueError when the table is empty."""
    if table.empty:
        raise ValueError(f"{source} has no rows")
    r = table.iloc[0]
    extra = {k: r[k] for k in ("r2", "resid_cv") if k in r.index}
    if "floor_s" in r.index and np.isfinite(r["floor_s"]):  # tables from before it lack it
        extra["floor_s"] = float(r["floor_s"])
    if "n" in r.index:
        extra["n"] = int(r["n"])
    return QuadraticCost(
        a=float(r["a"]), c=float(r["c"]), b=float(r["b"]), d=float(r["d"]), source=source, **extra
    )


def run_quadratic(run) -> QuadraticCost | None:
    """The run's costmodel_quadratic as a step model, or None where the costmodel experiment
    wrote none (or an empty one). balance and training simulate with it: it predicts measured
    training steps better than the power law (reports/reference/h200/quick-5753865/validation)."""
    try:
        return model_from_quadratic(run.read_table("costmodel_quadratic"))
    except (FileNotFoundError, ValueError):
        return None
