"""Command-line entry points: `python -m suite fit-cost | simulate | forecast`.

Each function takes argv (without the command name) and returns an exit code; errors print one
line naming what was wrong and return 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace

import pandas as pd

from suite.balance.buckets import bucket_table
from suite.balance.costmodel import (
    CostModel,
    default_cost_model,
    fit_cost,
    fit_memory,
    fit_quadratic_cost,
    loo_error_quadratic,
    memory_budget,
)
from suite.balance.registry import OWN, PEERS, POLICIES, PolicyInputs, budgets, make_policy
from suite.balance.simulator import SimConfig, simulate, tune_s_cross
from suite.rundir import read_csv

METRIC_LABELS = {
    "rank_cv": "rank CV",
    "rank_cv_p99": "rank CV p99",
    "maxmean": "max/mean",
    "maxmean_p99": "max/mean p99",
    "bubble": "bubble",
    "step_cv": "step CV",
    "throughput": "tokens/s",
    "floor_p5": "p5 tokens/s",
    "planner_ms": "planner ms",
}
PERCENT = ("rank_cv", "rank_cv_p99", "bubble", "step_cv")  # fractions, printed as percent


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def _load_cost(path: str | None, step_model: str = "auto") -> CostModel:
    cost = CostModel.load(path) if path else default_cost_model()
    if not math.isfinite(cost.m_mem):
        raise ValueError(f"{path}: the cost JSON has no m_mem; refit with --capacity-gb")
    if step_model == "power":  # whole steps: the optimizer is inside a, charged per batch
        return replace(cost.with_quadratic(None), optimizer_s=0.0)
    return cost


def _step_name(cost: CostModel) -> str:
    return "quadratic a + c*B + b*B*S + d*B*S^2" if cost.quadratic else "power law a + b*B*S^p"


def _buckets(manifest: str | None, mix: str, seed: int) -> tuple[pd.DataFrame, str]:
    from suite.data.corpus import sample_corpus
    from suite.data.manifest import read_manifest

    if manifest:
        return bucket_table(read_manifest(manifest)["tokens"]), f"manifest {manifest}"
    return bucket_table(sample_corpus(100_000, mix, seed=seed)["tokens"]), f"{mix} mix"


def _sim_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpus", type=int, default=16, help="number of data-parallel ranks R")
    p.add_argument("--steps", type=int, default=1000, help="simulated steps N (default 1000)")
    p.add_argument("--cost", help="cost JSON from `fit-cost` (default: analytic Wan-14B on H200)")
    p.add_argument(
        "--step-model",
        choices=("auto", "power"),
        default="auto",
        help="what simulated steps cost: auto = the cost JSON's quadratic form "
        "a + c*B + b*B*S + d*B*S^2 where it has one (fit-cost writes it), else its power law; "
        "power = always the power law a + b*B*S^p",
    )
    p.add_argument(
        "--noise",
        type=float,
        default=0.05,
        help="per-sample multiplicative noise CV (default 0.05)",
    )
    p.add_argument(
        "--collective-s",
        type=float,
        default=0.0,
        help="non-overlapped collective seconds per step (default 0)",
    )
    p.add_argument(
        "--optimizer-s",
        type=float,
        default=None,
        help="optimizer seconds per step, charged once (default: the cost JSON's optimizer_s, "
        "which fit-cost writes where the sweep timed it apart, else 0)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def _config(a, cost: CostModel) -> SimConfig:
    return SimConfig(
        ranks=a.gpus,
        steps=a.steps,
        noise_cv=a.noise,
        collective_s=a.collective_s,
        optimizer_s=cost.optimizer_s if a.optimizer_s is None else a.optimizer_s,
        seed=a.seed,
    )


def simulate_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m suite simulate",
        description="Simulate R synchronous data-parallel ranks for N steps under a batching "
        "policy and print rank CV, max/mean, bubble, step CV and throughput.",
    )
    p.add_argument(
        "--policy",
        choices=list(POLICIES),
        default="dual",
        help="batching policy (suite.balance.registry); default dual",
    )
    p.add_argument(
        "--manifest",
        help="CSV/JSONL/Parquet with height, width, frames per sample (default: the synthetic mix)",
    )
    p.add_argument(
        "--mix",
        choices=("default", "long-video"),
        default="default",
        help="synthetic mix when no manifest is given",
    )
    p.add_argument(
        "--latency",
        help="measured per-shape latency CSV (B, S, step_s): micro-batches of a measured shape "
        "cost its median, other shapes the cost model's step model",
    )
    _sim_args(p)
    a = p.parse_args(argv)
    try:
        cost = _load_cost(a.cost, a.step_model)
        buckets, data = _buckets(a.manifest, a.mix, a.seed)
        pol = make_policy(a.policy, PolicyInputs.from_cost(cost, buckets))
        timing = cost.step_model()
        if a.latency:
            from suite.balance.simulator import LatencyTable

            timing = LatencyTable(read_csv(a.latency), fallback=timing)
        m = simulate(buckets, pol, timing, _config(a, cost)).metrics()
    except (ValueError, OSError, KeyError) as e:
        return _fail(str(e))
    out = {
        "policy": a.policy,
        "gpus": a.gpus,
        "steps": a.steps,
        "data": data,
        "m_mem": cost.m_mem,
        "m_comp": getattr(pol, "m_comp", None),
        "p": cost.p,
        "step_model": _step_name(cost) if not a.latency else f"latency table {a.latency}",
        **m,
    }
    if a.json:
        print(json.dumps(out, default=float))
    else:
        print(
            f"{a.policy} on {a.gpus} ranks x {a.steps} steps, {data}, p = {cost.p:.3f}, "
            f"steps costed by the {out['step_model']}"
        )
        for k, label in METRIC_LABELS.items():
            v = m[k]
            print(f"  {label:<14} {100 * v:8.2f} %" if k in PERCENT else f"  {label:<14} {v:10.3f}")
    return 0


def forecast_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m suite forecast",
        description="Forecast balance metrics of every policy of suite.balance.registry for your "
        "dataset on R ranks: the suite's own (" + ", ".join(OWN) + ") and the peers public "
        "training stacks ship (" + ", ".join(PEERS) + "), and recommend M_mem, M_comp and a "
        "policy among all of them (highest simulated throughput).",
    )
    p.add_argument(
        "--manifest",
        required=True,
        help="your dataset: CSV (header line), JSONL (one object a line) or Parquet, one sample a "
        "row, columns height, width (pixels, multiples of 16) and frames (1 + 4k; 1 for an "
        "image). Without a frames column every row is read as an image, and a note says so. A "
        "bad file, row or value stops with an error naming the file and line",
    )
    p.add_argument("--plot", help="write a bar chart of the metrics to this PNG/SVG path")
    _sim_args(p)
    a = p.parse_args(argv)
    try:
        cost = _load_cost(a.cost, a.step_model)
        buckets, data = _buckets(a.manifest, "default", a.seed)
        rows, skipped = [], []
        for name in POLICIES:
            try:
                pol = make_policy(name, PolicyInputs.from_cost(cost, buckets))
            except ValueError as e:
                skipped.append(f"{name} ({e})")  # a policy that does not apply to this data
                continue
            m = simulate(buckets, pol, cost.step_model(), _config(a, cost)).metrics()
            rows.append({"policy": name, **budgets(pol), **m})
        if not rows:
            raise ValueError(f"no policy applies: {'; '.join(skipped)}")
    except (ValueError, OSError, KeyError) as e:
        return _fail(str(e))
    table = pd.DataFrame(rows)
    best = table.loc[table["throughput"].idxmax()]
    runner_up = table.drop(index=best.name).sort_values("throughput").iloc[-1:]
    kind = "the suite's own" if best["policy"] in OWN else "a peer's"
    why = (
        f"highest simulated throughput among {len(table)} policies ({kind}; "
        f"{best['throughput']:.4g} tokens/s, next {runner_up['policy'].iloc[0]} "
        f"{runner_up['throughput'].iloc[0]:.4g}) on {a.gpus} ranks"
        if len(table) > 1
        else "the only policy that applies"
    )
    rec = {
        "policy": best["policy"],
        "reason": why,
        "m_mem": cost.m_mem,
        "m_comp": None if pd.isna(best.get("m_comp")) else float(best["m_comp"]),
        "p": cost.p,
        "candidates": list(POLICIES),  # every registry row: simulated, or skipped with the reason
        "skipped": skipped,
    }
    if a.json:
        print(
            json.dumps(
                {
                    "data": data,
                    "gpus": a.gpus,
                    "step_model": _step_name(cost),
                    "policies": rows,
                    "recommend": rec,
                },
                default=float,
            )
        )
    else:
        print(
            f"forecast for {data} ({int(buckets['count'].sum())} samples, "
            f"{len(buckets)} sequence lengths) on {a.gpus} ranks; steps costed by the "
            f"{_step_name(cost)}"
        )
        show = table[["policy", *METRIC_LABELS]].copy()
        for k in PERCENT:  # fractions -> percent for reading
            show[k] = 100 * show[k]
        show = show.rename(
            columns={k: v + (" %" if k in PERCENT else "") for k, v in METRIC_LABELS.items()}
        )
        print(show.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        for s_ in skipped:
            print(f"skipped: {s_}")
        m_comp = (
            f", M_comp = {rec['m_comp']:.4g} (B*S^p, p = {cost.p:.3f})" if rec["m_comp"] else ""
        )
        print(f"recommend: policy {rec['policy']}, M_mem = {cost.m_mem:.0f} tokens{m_comp}: {why}")
    if a.plot:
        _plot(table, a.plot, f"{data}, {a.gpus} ranks")
    return 0


def _plot(table: pd.DataFrame, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3))
    axes = fig.subplots(1, 4)
    for ax, k in zip(axes, ("rank_cv", "maxmean", "bubble", "throughput")):
        palette = ["#c0392b", "#2e86c1", "#1b7f3b", "#8e44ad", "#d68910", "#566573"]
        ax.bar(table["policy"], table[k], color=[palette[i % 6] for i in range(len(table))])
        ax.set_title(METRIC_LABELS[k], fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)


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
        default="256,512,1024,2048",
        help="comma-separated S values to sweep (default 256,512,1024,2048)",
    )
    p.add_argument(
        "--batch-sizes", default="1,2,4", help="comma-separated B values (default 1,2,4)"
    )
    p.add_argument(
        "--token-budget",
        type=int,
        default=8192,
        help="skip B > 1 shapes with B*S above this (default 8192)",
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--model", default="tiny", help="model config for the step function")
    p.add_argument("--layers", type=int, default=None, help="layer-count override for --model")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default=None, help="fp32 or bf16 (default: fp32 on CPU, else bf16)")
    p.add_argument("--p", type=float, default=None, help="fix the exponent p (default: fit it)")
    p.add_argument(
        "--capacity-gb",
        type=float,
        default=None,
        help="device memory for M_mem (default: the Wan-14B-on-H200 budget)",
    )
    p.add_argument("--safety", type=float, default=0.10, help="memory safety margin (0.10)")
    p.add_argument("--out", default="cost.json", help="where to write the cost JSON")
    p.add_argument("--table", help="also write the sweep rows to this CSV")
    a = p.parse_args(argv)
    try:
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
    for their model (on the H200 reference sweep: R^2 0.999 against 0.912). Printed only."""
    B, S, t = (sweep[c].to_numpy(float) for c in ("B", "S", "step_s"))
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
        df = read_csv(a.sweep)
        missing = {"B", "S", "step_s"} - set(df.columns)
        if missing:
            raise ValueError(f"{a.sweep}: missing columns {sorted(missing)}; needs B, S, step_s")
        return df
    shapes = grid(
        [int(s) for s in a.seq_lens.split(",")],
        a.token_budget,
        [int(b) for b in a.batch_sizes.split(",")],
    )
    if a.synthetic:
        fn = synthetic_step_fn()
    else:
        try:
            from suite.train.stepfn import make_step_fn
        except ImportError as e:
            raise ValueError(
                f"no step function to time ({e}); pass --sweep CSV or --synthetic"
            ) from None
        dtype = a.dtype or ("fp32" if a.device == "cpu" else "bf16")
        fn = make_step_fn(a.model, a.layers, device=a.device, dtype=dtype)
    return sweep(
        fn,
        shapes,
        warmup=a.warmup,
        repeats=a.repeats,
        meta={"device": a.device, "model": "synthetic" if a.synthetic else a.model},
    )


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
    from suite.data.corpus import sample_corpus

    cost = fit_cost(df["B"], df["S"], df["step_s"], p=a.p, source=a.sweep or "fit-cost sweep")
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
    per_batch, opt_s, src = _per_batch_seconds(df)
    try:
        quad = fit_quadratic_cost(df["B"], df["S"], per_batch, source=f"fit-cost quadratic, {src}")
    except ValueError:
        quad = None  # reported by _print_physical_form
    cost = replace(cost.with_quadratic(quad), optimizer_s=opt_s if quad is not None else 0.0)
    buckets = bucket_table(sample_corpus(20_000, "default").tokens)
    s_cross, _ = tune_s_cross(buckets, cost.step_model(), m_mem, p=cost.p)
    return cost.with_budgets(m_mem, s_cross)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(simulate_main(sys.argv[1:]))
