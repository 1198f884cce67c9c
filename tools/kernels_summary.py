"""Markdown summary of a kernels experiment table (kernels.csv): % of copy bandwidth of the fused
kernels by op, output dtype, D and N, the speedups over each baseline (geometric mean over D
at one N, the range in brackets), and the kernel issue's targets shape by shape (how many met),
every shape's GB/s beside the baselines', so reports/reference/h200/kernels-a1294db/KERNELS.md is generated,
not typed.

    python tools/kernels_summary.py reports/reference/h200/kernels-a1294db/kernels.csv [--n 65536]
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

# The kernel issue's bandwidth targets: (target, op, smallest N, largest N, % of the copy), over
# every fused shape with the op's default kernels (bf16 and fp32 x, x's or fp32 y, B = 1 and 2)
BANDWIDTH_TARGETS = [
    ("forward >= 90% of the copy, N >= 16384", "fwd", 16384, None, 90.0),
    ("forward >= 80% of the copy, N = 4096", "fwd", 4096, 4096, 80.0),
    ("backward >= 80% of the copy", "bwd", 0, None, 80.0),
]
# Its speed targets: (target, op, fused impl, baseline impl, only at N, least speedup)
SPEED_TARGETS = [
    ("forward >= 10x over the Wan path, N = 65536", "fwd", "fused-f32out", "wan-eager", 65536, 10),
    ("backward >= 3x over the Wan path, N = 65536", "bwd", "fused-f32out", "wan-eager", 65536, 3),
    ("forward faster than torch.compile of eager", "fwd", "fused", "compile-eager", None, 1),
    ("forward faster than torch.compile of Wan", "fwd", "fused-f32out", "compile-wan", None, 1),
    ("backward faster than torch.compile of eager", "bwd", "fused", "compile-eager", None, 1),
    ("backward faster than torch.compile of Wan", "bwd", "fused-f32out", "compile-wan", None, 1),
]
SHAPE = ["op", "dtype", "out_dtype", "B", "N", "D"]


def _shape(r) -> str:
    y = "bf16" if r["out_dtype"] == "bfloat16" else "fp32"
    return f"{y} y, B = {r['B']}, N = {r['N']}, D = {r['D']}"


def targets_table(t: pd.DataFrame) -> str:
    """Each target of the kernel issue by x dtype: shapes, how many meet it, the worst shape."""
    rows = ["| target | x | shapes | met | worst shape |", "|---|---|---|---|---|"]
    # fp32 x has one fused kernel per shape (its y is fp32 either way): one row per shape
    fused = t[t.impl.isin(["fused", "fused-f32out"])].drop_duplicates(SHAPE)
    for label, op, lo, hi, pct in BANDWIDTH_TARGETS:
        for x in ("bfloat16", "float32"):
            sel = fused[(fused.op == op) & (fused.dtype == x) & (fused.N >= lo)]
            sel = sel[sel.N <= (hi or sel.N.max())]
            for col, ref in (("pct_copy_bw", "2 GB copy"), ("pct_copy_same", "same-size copy")):
                if sel.empty or col not in sel or sel[col].isna().all():
                    continue
                w = sel.loc[sel[col].idxmin()]
                rows.append(
                    f"| {label} ({ref}) | {x} | {len(sel)} | {int((sel[col] >= pct).sum())} | "
                    f"{w[col]:.1f}%: {_shape(w)} |"
                )
    for label, op, impl, base, n, least in SPEED_TARGETS:
        for x in ("bfloat16", "float32"):
            sel = t[(t.op == op) & (t.dtype == x) & ((t.N == n) if n else True)]
            a = sel[sel.impl == impl].set_index(SHAPE[1:]).ms_median
            b = sel[sel.impl == base].set_index(SHAPE[1:]).ms_median
            r = (b / a).dropna()
            if r.empty:
                continue
            w = dict(zip(SHAPE[1:], r.idxmin()))
            rows.append(
                f"| {label} | {x} | {len(r)} | {int((r >= least).sum())} | "
                f"{r.min():.2f}x: {_shape(w)}{_ceiling(sel[sel.impl == impl], b, r.idxmin())} |"
            )
    return "\n".join(rows)


def _ceiling(fused: pd.DataFrame, base_ms: pd.Series, shape) -> str:
    """The speedup a copy of the shape's own bytes would have over the baseline: the most any
    kernel moving those bytes could reach (fp32 x against the Wan path: ~4.3x, not 10x)."""
    if "copy_same_gbps" not in fused or fused.copy_same_gbps.isna().all():
        return ""
    r = fused.set_index(SHAPE[1:]).loc[shape]
    copy_ms = r["bytes"] / (r["copy_same_gbps"] * 1e9) * 1e3
    return f" (a same-size copy: {base_ms.loc[shape] / copy_ms:.2f}x)"


def beside_table(t: pd.DataFrame, op: str, x: str = "bfloat16", b: int = 1) -> str:
    """GB/s (% of the 2 GB copy) of the fused kernels beside every baseline, shape by shape:
    x's dtype out for fused, eager and its torch.compile; fp32 out (Wan's) for the rest."""
    impls = [
        ("fused", "fused"),
        ("eager", "eager"),
        ("compile(eager)", "compile-eager"),
        ("fused, fp32 out", "fused-f32out"),
        ("Wan path", "wan-eager"),
        ("compile(Wan)", "compile-wan"),
    ]
    if op == "bwd":
        impls.insert(4, ("D-tile, fp32 out", "fused-dtile-f32out"))
    sel = t[(t.op == op) & (t.dtype == x) & (t.B == b)].set_index(["impl", "D", "N"])
    rows = [
        "| D | N | " + " | ".join(name for name, _ in impls) + " |",
        "|---|---|" + "---|" * len(impls),
    ]
    for D in sorted(t.D.unique()):
        for n in sorted(t.N.unique()):
            cells = []
            for _, impl in impls:
                r = sel.loc[(impl, D, n)] if (impl, D, n) in sel.index else None
                cells.append("-" if r is None else f"{r.gbps:.0f} ({r.pct_copy_bw:.1f})")
            rows.append(f"| {D} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


# What a miss of a bandwidth target (against the 2 GB copy) would need, as % of a copy of the
# shape's own bytes: above 100% no kernel that moves those bytes can meet it (a copy cannot)
REACH_BINS = [(100.0, "over 100%: not even a copy"), (95.0, "95-100%"), (0.0, "under 95%")]


def misses_table(t: pd.DataFrame) -> tuple[str, pd.DataFrame]:
    """Each bandwidth-target miss against the 2 GB copy by op and by what it would need: the
    target over the same-size copy's own % of the 2 GB copy (copy_same_gbps / copy_gbps).
    Returns the count table and the misses a copy could meet at under 95% of its speed."""
    fused = t[t.impl.isin(["fused", "fused-f32out"])].drop_duplicates(SHAPE).copy()
    fused["target"] = np.nan
    for _label, op, lo, hi, pct in BANDWIDTH_TARGETS:
        sel = (fused.op == op) & (fused.N >= lo) & (fused.N <= (hi or fused.N.max()))
        fused.loc[sel, "target"] = pct
    m = fused[fused.pct_copy_bw < fused.target].copy()
    m["need"] = 100 * m.target / (100 * m.copy_same_gbps / m.copy_gbps)
    rows = [
        "| op | misses | " + " | ".join(b for _, b in REACH_BINS) + " |",
        "|---|---|---|---|---|",
    ]
    for op in ("fwd", "bwd"):
        sel = m[m.op == op]
        counts, lo_prev = [], np.inf
        for lo, _ in REACH_BINS:
            counts.append(int(((sel.need >= lo) & (sel.need < lo_prev)).sum()))
            lo_prev = lo
        rows.append(f"| {op} | {len(sel)} | " + " | ".join(map(str, counts)) + " |")
    return "\n".join(rows), m[m.need < 95.0].sort_values("need")


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
    try:
        t = pd.read_csv(a.csv)
    except (OSError, ValueError, EOFError) as e:  # missing, truncated or not a CSV
        ap.error(f"{a.csv}: cannot read it as CSV ({e})")
    copy = t.copy_gbps.median()
    print(f"% of copy bandwidth ({copy:.0f} GB/s), bf16 x, B = 1 (B = 2 in brackets), fused:\n")
    print(pct_table(t))
    if "pct_copy_same" in t.columns and t.pct_copy_same.notna().any():
        print("\nThe same against a copy of each row's own bytes (same flush; pct_copy_same):\n")
        print(pct_table(t, "pct_copy_same"))
    print("\n" + fp32_x_line(t, a.n))
    print(f"\nSpeedups, bf16 x, B = 1, N = {a.n}, geometric mean over D:\n")
    print("\n".join(speedup_lines(t, a.n)))
    for op, name in (("fwd", "Forward"), ("bwd", "Backward")):
        print(f"\n{name}, bf16 x, B = 1, shape by shape: GB/s (% of the 2 GB copy)\n")
        print(beside_table(t, op))
    print(
        "\nThe kernel issue's targets, shape by shape (fused kernels, bf16 and fp32 x, B = 1, 2):\n"
    )
    print(targets_table(t))
    if "copy_same_gbps" in t.columns and t.copy_same_gbps.notna().any():
        table, reachable = misses_table(t)
        print(
            "\nThe bandwidth misses against the 2 GB copy, by the % of a same-size copy's speed"
            " each would need:\n"
        )
        print(table)
        if not reachable.empty:
            print("\nThose a copy of the same bytes could meet at under 95% of its speed:\n")
            for _, r in reachable.iterrows():
                print(
                    f"- {r.op}, {'bf16' if r['dtype'] == 'bfloat16' else 'fp32'} x, {_shape(r)}: {r.pct_copy_bw:.1f}% of the 2 GB copy,"
                    f" {r.pct_copy_same:.1f}% of its own; needs {r.need:.1f}%"
                )


if __name__ == "__main__":
    main()
