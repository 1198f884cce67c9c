"""Markdown summary of a kernels experiment table (kernels.csv): % of copy bandwidth of the fused
kernels by op, output dtype, D and N, and the speedups over each baseline (geometric mean over D
at one N, the range in brackets), so reports/reference/h200/KERNELS.md is generated, not typed.

    python tools/kernels_summary.py reports/reference/h200/kernels.csv [--n 65536]
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

# (label, op, fused impl, baseline impl, x dtype, y/dy dtype)
SPEEDUPS = [
    ("forward over eager", "fwd", "fused", "eager", "bfloat16", "bfloat16"),
    (
        "forward over torch.compile of eager",
        "fwd",
        "fused",
        "compile-eager",
        "bfloat16",
        "bfloat16",
    ),
    (
        "fp32-out forward over the Wan path (C11)",
        "fwd",
        "fused-f32out",
        "wan-eager",
        "bfloat16",
        "float32",
    ),
    (
        "fp32-out forward over torch.compile of the Wan path",
        "fwd",
        "fused-f32out",
        "compile-wan",
        "bfloat16",
        "float32",
    ),
    ("backward over eager", "bwd", "fused", "eager", "bfloat16", "bfloat16"),
    (
        "backward over torch.compile of eager",
        "bwd",
        "fused",
        "compile-eager",
        "bfloat16",
        "bfloat16",
    ),
    (
        "fp32-dy backward over the Wan path",
        "bwd",
        "fused-f32out",
        "wan-eager",
        "bfloat16",
        "float32",
    ),
    (
        "fp32-dy backward over torch.compile of the Wan path",
        "bwd",
        "fused-f32out",
        "compile-wan",
        "bfloat16",
        "float32",
    ),
    (
        "D-tile backward over the Wan path (C12)",
        "bwd",
        "fused-dtile-f32out",
        "wan-eager",
        "bfloat16",
        "float32",
    ),
]


def pct_table(t: pd.DataFrame, col: str = "pct_copy_bw") -> str:
    """% of copy bandwidth (`col`: of the 2 GB copy, or pct_copy_same: of a copy of the same
    bytes), bf16 x, B = 1 (B = 2 in brackets), per (op, y dtype, D) and N."""
    ns = sorted(t.N.unique())
    rows = [
        "| op, y | D | " + " | ".join(f"N = {n}" for n in ns) + " |",
        "|---|---|" + "---|" * len(ns),
    ]
    for op in ("fwd", "bwd"):
        for impl, y in (("fused", "bf16"), ("fused-f32out", "fp32")):
            for D in sorted(t.D.unique()):
                cells = []
                for n in ns:
                    sel = t[
                        (t.impl == impl)
                        & (t.op == op)
                        & (t.dtype == "bfloat16")
                        & (t.D == D)
                        & (t.N == n)
                    ]
                    by_b = dict(zip(sel.B, sel[col]))
                    b2 = f" ({by_b[2]:.1f})" if 2 in by_b else ""
                    cells.append(f"{by_b[1]:.1f}{b2}" if 1 in by_b else "-")
                rows.append(
                    f"| {op}, {y} {'y' if op == 'fwd' else 'dy'} | {D} | "
                    + " | ".join(cells)
                    + " |"
                )
    return "\n".join(rows)


def fp32_x_line(t: pd.DataFrame, n: int) -> str:
    sel = t[(t.impl == "fused") & (t.dtype == "float32") & (t.B == 1) & (t.N == n)]
    parts = []
    for op, name in (("fwd", "forward"), ("bwd", "backward")):
        v = sel[sel.op == op].sort_values("D")
        parts.append(f"{name} " + " / ".join(f"{p:.1f}" for p in v.pct_copy_bw) + "%")
    ds = " / ".join(str(d) for d in sorted(sel.D.unique()))
    return f"fp32 x, B = 1, N = {n}: " + ", ".join(parts) + f" (D = {ds})."


def speedup_lines(t: pd.DataFrame, n: int) -> list[str]:
    out = []
    for label, op, fused, base, x, y in SPEEDUPS:
        key = ["D"]
        sel = t[(t.op == op) & (t.dtype == x) & (t.out_dtype == y) & (t.B == 1) & (t.N == n)]
        a = sel[sel.impl == fused].set_index(key).ms_median
        b = sel[sel.impl == base].set_index(key).ms_median
        r = (b / a).dropna()
        if r.empty:
            continue
        gm = float(np.exp(np.log(r).mean()))
        out.append(f"- {label}: {gm:.2f}x ({r.min():.2f}-{r.max():.2f} over D)")
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--n", type=int, default=65536, help="sequence length of the speedups")
    a = ap.parse_args(argv)
    t = pd.read_csv(a.csv)
    copy = t.copy_gbps.median()
    print(f"% of copy bandwidth ({copy:.0f} GB/s), bf16 x, B = 1 (B = 2 in brackets), fused:\n")
    print(pct_table(t))
    if "pct_copy_same" in t.columns and t.pct_copy_same.notna().any():
        print("\nThe same against a copy of each row's own bytes (same flush; pct_copy_same):\n")
        print(pct_table(t, "pct_copy_same"))
    print("\n" + fp32_x_line(t, a.n))
    print(f"\nSpeedups, bf16 x, B = 1, N = {a.n}, geometric mean over D:\n")
    print("\n".join(speedup_lines(t, a.n)))


if __name__ == "__main__":
    main()
