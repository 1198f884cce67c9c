"""`python -m suite fit-cost`: a shape-benchmark sweep (or a measured one, --sweep) fitted to the
cost JSON that `simulate`, `forecast` and the trainer's --cost read (suite.balance.costmodel).
Takes argv (without the command name) and returns an exit code; errors print one line and
return 2.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import pandas as pd

from suite.balance.buckets import bucket_table
from suite.balance.cli import _fail
from suite.balance.costmodel import (
    P_BOUNDS,
    CostModel,
    default_cost_model,
    fit_cost,
    fit_memory,
    fit_quadratic_cost,
    loo_error_quadratic,
    memory_budget,
)
from suite.balance.simulator import tune_s_cross
from suite.cli_args import check_writable, int_list, real, whole
from suite.rundir import read_csv


def fit_cost_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m suite fit-cost",
        description="Shape-benchmark sweep over (B, S) and fit step_time ~ a + b*B*S^p and the "
        "physical form a + c*B + b*B*S + d*B*S^2; write a cost JSON (the policies' p; M_mem from "
        "the memory fit and --capacity-gb; M_comp from throughput simulated with the physical "
        "form on the default mix, which simulate and forecast also cost their steps with). "
        "Without --sweep it times suite.train.stepfn.make_step_fn on this machine (or "
        "--synthetic).",
    )
    p.add_argument(
        "--sweep",
        help="CSV of measured rows with columns B, S, step_s "
        "[, peak_mem_bytes] instead of running a sweep",
    )
    p.add_argument(
        "--synthetic",
        action="store_true",
        help="sweep a synthetic step function (dry run, no torch)",
    )
    p.add_argument(
        "--seq-lens",
        type=int_list(1),
        default="256,512,1024,2048",
        help="comma-separated S values to sweep (default 256,512,1024,2048)",
    )
    p.add_argument(
        "--batch-sizes",
        type=int_list(1),
        default="1,2,4",
        help="comma-separated B values (default 1,2,4)",
    )
    p.add_argument(
        "--token-budget",
        type=whole(1),
        default=8192,
        help="skip B > 1 shapes with B*S above this (default 8192)",
    )
    p.add_argument("--repeats", type=whole(1), default=3)
    p.add_argument("--warmup", type=whole(0), default=1)
    p.add_argument("--model", default="tiny", help="model config for the step function")
    p.add_argument("--layers", type=whole(1), default=None, help="layer-count override for --model")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default=None, help="fp32 or bf16 (default: fp32 on CPU, else bf16)")
    p.add_argument(
        "--p",
        type=real(*P_BOUNDS),
        default=None,
        help=f"fix the exponent p, {P_BOUNDS[0]} to {P_BOUNDS[1]} (default: fit it)",
    )
    p.add_argument(
        "--capacity-gb",
        type=real(0, open_lo=True),
        default=None,
        help="device memory for M_mem (default: the Wan-14B-on-H200 budget)",
    )
    p.add_argument("--safety", type=real(0, 0.99), default=0.10, help="memory safety margin (0.10)")
    p.add_argument(
        "--out",
        default="cost.json",
        help="where to write the cost JSON (checked before the sweep)",
    )
    p.add_argument("--table", help="also write the sweep rows to this CSV")
    a = p.parse_args(argv)
    try:
        check_writable(a.out, "--out")
        if a.table:
            check_writable(a.table, "--table")
        sweep = _get_sweep(a)
        cost = _fit_from_sweep(sweep, a)
    except (ValueError, OSError, RuntimeError) as e:
        return _fail(str(e))
    cost.save(a.out)
    if a.table:
        sweep.to_csv(a.table, index=False)
    lo, hi = cost.p_ci
    print(
        f"fit {len(sweep)} rows ({cost.n} shapes, medians): a = {cost.a:.4g} s, b = {cost.b:.4g}, p = {cost.p:.3f} "
        f"[{lo:.3f}, {hi:.3f}], R^2 = {cost.r2:.4f}, leave-one-bucket-out {100 * cost.loo_err:.1f}%"
    )
    print(f"M_mem = {cost.m_mem:.0f} tokens, M_comp = {cost.m_comp:.4g}; wrote {a.out}")
    if cost.optimizer_s > 0:
        print(
            f"optimizer {1e3 * cost.optimizer_s:.1f} ms a step, timed apart by the sweep: the "
            "physical form prices a micro-batch without it, simulate and forecast add it once a step"
        )
    _print_physical_form(sweep)
    return 0


def _print_physical_form(sweep: pd.DataFrame) -> None:
    """The physical form beside the power law, so a user sees whether a + b*B*S^p is adequate
    for their model. Printed only; over
    the shapes the fits take (launch-bound ones left out)."""
    from suite.balance.shapebench import fit_rows

    B, S, t = (sweep[c].to_numpy(float) for c in ("B", "S", "step_s"))
    keep, _ = fit_rows(B, S, t)
    B, S, t = B[keep], S[keep], t[keep]
    try:
        q = fit_quadratic_cost(B, S, t)
    except ValueError as e:
        print(f"physical form a + c*B + b*B*S + d*B*S^2 not fitted: {e}")
        return
    print(
        f"physical form a + c*B + b*B*S + d*B*S^2: a = {q.a:.4g} s, c = {q.c:.4g}, b = {q.b:.4g}, "
        f"d = {q.d:.4g}, R^2 = {q.r2:.4f}, leave-one-bucket-out "
        f"{100 * loo_error_quadratic(B, S, t):.1f}% (written beside the power law: simulate and "
        "forecast cost their steps with it and tune M_comp on it; the policies keep p)"
    )


def _get_sweep(a) -> pd.DataFrame:
    from suite.balance.shapebench import grid, sweep, synthetic_step_fn

    if a.sweep:
        return _read_sweep(a.sweep)
    shapes = grid(a.seq_lens, a.token_budget, a.batch_sizes)
    if a.synthetic:
        fn = synthetic_step_fn()
    else:
        try:
            from suite.train.stepfn import make_step_fn
        except ImportError as e:
            raise ValueError(
                f"no step function to time ({e}); pass --sweep CSV or --synthetic"
            ) from None
        _check_step_args(a)
        dtype = a.dtype or ("fp32" if a.device == "cpu" else "bf16")
        fn = make_step_fn(a.model, a.layers, device=a.device, dtype=dtype)
    return sweep(
        fn,
        shapes,
        warmup=a.warmup,
        repeats=a.repeats,
        meta={"device": a.device, "model": "synthetic" if a.synthetic else a.model},
    )


def _check_step_args(a) -> None:
    """--model, --dtype and --device name a config, a dtype and a device this machine has."""
    import torch

    from suite.model.wan import CONFIGS, DTYPES

    for arg, v, ok in (("--model", a.model, CONFIGS), ("--dtype", a.dtype, DTYPES)):
        if v is not None and v not in ok:
            raise ValueError(f"{arg} must be one of {', '.join(ok)}, got {v!r}")
    try:
        dev = torch.device(a.device)
    except RuntimeError:
        raise ValueError(f"--device must be cpu or cuda[:N], got {a.device!r}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: this machine has no CUDA device; use --device cpu")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"--device must be cpu or cuda[:N], got {a.device!r}")


def _read_sweep(path: str) -> pd.DataFrame:
    """The --sweep table: columns B, S (whole numbers >= 1) and step_s (finite, > 0); a
    truncated or malformed row is refused by line (the header is line 1)."""
    import numpy as np

    try:
        df = read_csv(path)
    except (OSError, ValueError, EOFError) as e:  # ParserError, a cut .gz, a missing file
        raise ValueError(f"--sweep {path}: cannot read it as CSV ({e})") from None
    missing = {"B", "S", "step_s"} - set(df.columns)
    if missing:
        raise ValueError(f"{path}: missing columns {sorted(missing)}; needs B, S, step_s")
    for col, ok in (
        ("B", lambda v: np.isfinite(v) & (v >= 1) & (v == np.round(v))),
        ("S", lambda v: np.isfinite(v) & (v >= 1) & (v == np.round(v))),
        ("step_s", lambda v: np.isfinite(v) & (v > 0)),
    ):
        v = pd.to_numeric(df[col], errors="coerce").to_numpy(float)
        bad = np.flatnonzero(~ok(v))
        if len(bad):
            what = "a finite number > 0" if col == "step_s" else "a whole number >= 1"
            raise ValueError(
                f"{path}:{bad[0] + 2}: {col} must be {what}, got {df[col].iloc[bad[0]]}"
            )
    return df


def _per_batch_seconds(df: pd.DataFrame) -> tuple[pd.Series, float, str]:
    """(seconds a micro-batch costs, the optimizer's seconds a step pays once, how): step_s less
    optimizer_s where the sweep timed it apart on every row (as the balance experiment does,
    suite.experiments.balance.sweep_step_model), else whole steps and 0."""
    import numpy as np

    if "optimizer_s" in df:
        opt = pd.to_numeric(df["optimizer_s"], errors="coerce")
        if bool(np.isfinite(opt).all() and (opt >= 0).all() and (opt < df["step_s"]).all()):
            return df["step_s"] - opt, float(opt.median()), "optimizer apart"
    return df["step_s"], 0.0, "whole steps"


def _fit_from_sweep(df: pd.DataFrame, a) -> CostModel:
    from suite.balance.shapebench import fit_rows
    from suite.data.corpus import sample_corpus

    # launch-bound shapes (their time is the host's) are left out of both fits, as the
    # costmodel experiment does; the physical form keeps their launch floor
    per_batch, opt_s, src = _per_batch_seconds(df)
    keep, lb = fit_rows(df["B"], df["S"], per_batch)
    if lb["excluded"].any():
        left = lb.loc[lb["excluded"], ["B", "S"]].values.tolist()
        print(f"launch-bound shapes left out of the fits: {left}")
    fit, per_batch = df[keep], per_batch[keep]
    cost = fit_cost(fit["B"], fit["S"], fit["step_s"], p=a.p, source=a.sweep or "fit-cost sweep")
    default = default_cost_model()
    m_mem = default.m_mem
    if a.capacity_gb is not None:
        if "peak_mem_bytes" not in df.columns:
            raise ValueError("--capacity-gb needs a peak_mem_bytes column in the sweep")
        m0, m1, r2 = fit_memory(df["B"], df["S"], df["peak_mem_bytes"])
        m_mem = memory_budget(m0, m1, a.capacity_gb * 1e9, a.safety)
        cost = CostModel(
            **{
                **cost.__dict__,
                "m0": m0,
                "m1": m1,
                "mem_r2": r2,
                "capacity_bytes": a.capacity_gb * 1e9,
                "safety": a.safety,
            }
        )
    # the physical form beside it: the simulator's step model (CostModel.step_model), fitted to
    # what a micro-batch costs where the sweep timed the optimizer apart (charged once a step)
    try:
        quad = fit_quadratic_cost(
            fit["B"], fit["S"], per_batch, source=f"fit-cost quadratic, {src}"
        )
        quad = replace(quad, floor_s=float(lb["floor_s"].iloc[0]))
    except ValueError:
        quad = None  # reported by _print_physical_form
    cost = replace(cost.with_quadratic(quad), optimizer_s=opt_s if quad is not None else 0.0)
    buckets = bucket_table(sample_corpus(20_000, "default").tokens)
    s_cross, _ = tune_s_cross(buckets, cost.step_model(), m_mem, p=cost.p)
    return cost.with_budgets(m_mem, s_cross)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(fit_cost_main(sys.argv[1:]))
