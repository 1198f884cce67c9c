"""Kernel benchmark (claims C11, C12): fused AdaLN forward/backward against eager, the official
Wan 2.1 path and torch.compile of each, in GB/s against the copy bandwidth of the same run.

Budget: the "quick" profile (bf16 at the three Wan widths, fp32 at D = 3072; N in {4096, 65536};
B = 1) takes about 1.5-2.5 minutes of the H200 budget, most of it torch.compile; "full" is the
whole grid (D in {1536, 3072, 5120}, N in {4096, 16384, 32760, 65536, 75600}, B in {1, 2}, bf16
and fp32), about 5 minutes. The cpu profile cannot run it (NEEDS = "cuda").

Timing: each repetition flushes L2 (writes a 512 MB buffer), then spins the GPU (at least ~1 ms and
at least twice the call's host enqueue time, suite.experiments.kernels.bench.spin_cycles) so the host has queued
the timed call before the GPU reaches it, then times the call alone between two CUDA events.
The median over the repetitions is reported; every sample is kept, with its host time
(table kernels_samples). One impl's repetitions run as one block, so repetition i of two impls
are not paired: a speedup's 95% CI resamples each impl's repetitions at each width on its own and
carries them through the geometric mean over widths (suite.stats.median_ratio_ci). That covers the
repetition noise of this run; suite.spread widens it to the between-run spread of the GPU model
where committed repeat runs give one (kernels_timings names the GPU).

Bytes model (suite/experiments/kernels/traffic.py: the fewest bytes each mode must move; the same
model for every impl of a row):
    fwd: read x (B*N*D*sx) + write y (B*N*D*sy) + modulation (2*B*D*sm) + stats (8*B*N)
    bwd: read x, dy (B*N*D*(sx+sy)) + write dx (B*N*D*sx) + stats + modulation and its grads
"""

from __future__ import annotations

import math

import pandas as pd

from suite import spread
from suite.experiments import metric_rows
from suite.stats import median_ratio_ci

NAME = "kernels"
NEEDS = "cuda"
EVIDENCE = {"kernels_timings": "measured", "kernels_samples": "measured"}  # suite.evidence
# seconds on one H200 (reproduce --budget defers it when they do not fit): measured
SECONDS = {"quick": 25, "full": 230}

WAN_WIDTHS = (1536, 3072, 5120)
CLAIM_N = 65536
FWD_IMPLS = ("fused", "fused-f32out", "eager", "wan-eager", "compile-eager", "compile-wan")
BWD_IMPLS = (
    "fused",
    "fused-dtile",
    "fused-f32out",
    "fused-dtile-f32out",
    "eager",
    "wan-eager",
    "compile-eager",
    "compile-wan",
)


# the columns of reports/reference/<machine>/kernels.csv (ARCHITECTURE.md)
REFERENCE_COLUMNS = [
    "impl",
    "op",
    "B",
    "N",
    "D",
    "dtype",
    "out_dtype",
    "ms_median",
    "gbps",
    "pct_copy_bw",
    "copy_gbps",
]


def grid(profile: str) -> list[tuple[int, int, int, str]]:
    """(B, N, D, dtype) shapes of a profile."""
    Ns = (4096, 16384, 32760, 65536, 75600)
    if profile == "full":
        return [
            (B, N, D, dt)
            for dt in ("bfloat16", "float32")
            for D in WAN_WIDTHS
            for B in (1, 2)
            for N in Ns
        ]
    if profile == "reference":  # what fits one device call (~4 min): B=1, fp32 at 3 N, some B=2
        return (
            [(1, N, D, "bfloat16") for D in WAN_WIDTHS for N in Ns]
            + [(1, N, D, "float32") for D in WAN_WIDTHS for N in (4096, 65536, 75600)]
            + [(2, 32760, D, "bfloat16") for D in WAN_WIDTHS]
        )
    shapes = [(1, N, D, "bfloat16") for D in WAN_WIDTHS for N in (4096, CLAIM_N)]
    return shapes + [(1, N, 3072, "float32") for N in (4096, CLAIM_N)]


def run(ctx) -> dict[str, pd.DataFrame]:
    from suite.experiments.kernels import bench

    reps = {"full": 40, "reference": 25}.get(ctx.profile, 30)
    return tables_of(*bench.measure(grid(ctx.profile), FWD_IMPLS, BWD_IMPLS, reps, ctx.log))


def tables_of(raw: list[dict], rows: list[dict]) -> dict[str, pd.DataFrame]:
    """bench.measure's samples and rows as the experiment's tables, the timings naming the GPU
    they ran on (the key of the between-run spread summarize widens the intervals with)."""
    import torch

    timings = pd.DataFrame(rows).assign(gpu=torch.cuda.get_device_name())
    return {"kernels_timings": timings, "kernels_samples": pd.DataFrame(raw)}


# ----------------------------------------------------------------------------- summary
def _claim_shapes(t: pd.DataFrame, op: str) -> pd.DataFrame:
    """The rows of the claims' shapes (bf16 x, B=1, N=CLAIM_N) of one op."""
    return t[(t.op == op) & (t.dtype == "bfloat16") & (t.N == CLAIM_N) & (t.B == 1)]


def _speedup(
    t: pd.DataFrame, op: str, impl: str, base: str, samples: pd.DataFrame | None = None
) -> tuple[float, list[float], float, float]:
    """(geometric mean over the Wan widths of median(base) / median(impl), the per-width ratios,
    95% CI low, high) at bf16, B=1, N=CLAIM_N. The CI bootstraps each impl's repetitions at each
    width on its own (stats.median_ratio_ci); NaN without the samples table."""
    sel, nan = _claim_shapes(t, op), math.nan
    ratios = []
    for D in WAN_WIDTHS:
        a = sel[(sel.impl == impl) & (sel.D == D)]
        b = sel[(sel.impl == base) & (sel.D == D)]
        if a.empty or b.empty:
            return nan, [], nan, nan
        ratios.append(float(b.ms_median.iloc[0]) / float(a.ms_median.iloc[0]))
    value = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    if samples is None or samples.empty:
        return value, ratios, nan, nan
    raw = _claim_shapes(samples, op)
    pairs = [
        tuple(raw[(raw.impl == name) & (raw.D == D)].ms.to_numpy(float) for name in (base, impl))
        for D in WAN_WIDTHS
    ]
    if any(len(x) < 2 for p in pairs for x in p):
        return value, ratios, nan, nan
    _, lo, hi = median_ratio_ci(pairs, seed=0)
    return value, ratios, lo, hi


def summarize(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    t, samples = tables.get("kernels_timings"), tables.get("kernels_samples")
    if t is None or t.empty:
        return metric_rows([])
    # speedups over torch.compile move between runs for more reasons than the rest (spread.py)
    between = {
        f: spread.between(tables, "kernels_timings", f) for f in ("kernels", "kernels-compile")
    }
    with_ci = samples is not None and not samples.empty
    cond = (
        f"x bf16, per-sample fp32 modulation, B=1, N={CLAIM_N}, "
        f"geometric mean over D in {list(WAN_WIDTHS)}; median of CUDA-event timings, L2 flushed; "
        + (
            "95% CI: percentile bootstrap of each impl's repetitions at each width; "
            if with_ci
            else "no CI (no kernels_samples table)"
        )
    )
    ev = "kernels_timings, kernels_samples; figure kernels_speedup"
    specs = [
        (
            "C11",
            "fwd_speedup_wan",
            "fwd",
            "fused-f32out",
            "wan-eager",
            "fused with fp32 output (the Wan path's exact semantics) vs the Wan 2.1 path",
        ),
        ("C11", "fwd_speedup_eager", "fwd", "fused", "eager", "fused (bf16 out) vs eager bf16"),
        (
            "C11",
            "fwd_speedup_wan_bf16out",
            "fwd",
            "fused",
            "wan-eager",
            "fused with bf16 output (fewer bytes) vs the Wan 2.1 path",
        ),
        (
            "C11",
            "fwd_speedup_compile_wan",
            "fwd",
            "fused-f32out",
            "compile-wan",
            "fused fp32-out vs torch.compile of the Wan path",
        ),
        (
            "C11",
            "fwd_speedup_compile_eager",
            "fwd",
            "fused",
            "compile-eager",
            "fused bf16-out vs torch.compile of eager",
        ),
        (
            "C12",
            "bwd_dtile_speedup_wan",
            "bwd",
            "fused-dtile-f32out",
            "wan-eager",
            "paper's D-tile backward vs the Wan path's autograd backward, both with fp32 output/dy",
        ),
        (
            "C12",
            "bwd_fused_speedup_wan",
            "bwd",
            "fused-f32out",
            "wan-eager",
            "single-pass persistent backward vs the Wan path's autograd backward, both fp32 dy",
        ),
        (
            "C12",
            "bwd_dtile_speedup_eager",
            "bwd",
            "fused-dtile",
            "eager",
            "D-tile backward vs eager autograd backward",
        ),
        (
            "C12",
            "bwd_fused_speedup_compile_wan",
            "bwd",
            "fused-f32out",
            "compile-wan",
            "single-pass backward vs torch.compile of the Wan path, both fp32 dy",
        ),
    ]
    rows = []
    for claim, metric, op, impl, base, what in specs:
        value, ratios, lo, hi = _speedup(t, op, impl, base, samples)
        family = spread.kernel_family(metric)
        row, model = between[family]
        lo, hi = spread.widen_in(family, value, lo, hi, row)
        per_d = ", ".join(f"D={d}: {r:.2f}x" for d, r in zip(WAN_WIDTHS, ratios))
        rows.append(
            dict(
                claim=claim,
                metric=metric,
                value=value,
                ci_low=lo,
                ci_high=hi,
                unit="x",
                conditions=f"{what}; {cond}{model if with_ci else ''}; {per_d}",
                evidence=ev,
            )
        )
    return metric_rows(rows)


def main(argv: list[str] | None = None) -> None:
    """python -m suite.experiments.kernels --profile full --out DIR: writes DIR/kernels.csv,
    DIR/kernels_samples.csv and prints the metrics."""
    import argparse
    from pathlib import Path

    from suite.rundir import RunContext, RunDir, atomic_write_text

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", choices=("quick", "reference", "full"), default="quick")
    p.add_argument("--out", type=Path, default=Path("reports/runs/kernels"))
    a = p.parse_args(argv)
    ctx = RunContext(run=RunDir(a.out / ".run"), profile=a.profile, device="cuda")
    ctx.log = print  # type: ignore[method-assign]
    tables = run(ctx)
    cols = REFERENCE_COLUMNS
    t = tables["kernels_timings"]
    atomic_write_text(
        a.out / "kernels.csv",
        t[cols + [c for c in t.columns if c not in cols]].to_csv(index=False, lineterminator="\n"),
    )
    atomic_write_text(
        a.out / "kernels_samples.csv",
        tables["kernels_samples"].to_csv(index=False, lineterminator="\n"),
    )
    print(summarize(tables).to_string())
