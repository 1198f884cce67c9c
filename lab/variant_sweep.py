"""The tuning lab's variant sweep: every kernel variant (lab/kernel_variants.py) timed against
the default fused kernel and the baselines with suite.experiments.kernels.bench's harness (L2-cold CUDA events).
Impl "fused@v" is suite.experiments.kernels.bench's "fused" impl with variant v selected on every call (a
backward uses the variant current when it runs, and the timed backward follows the forward of
the same impl).

    python -m lab.variant_sweep --out DIR [--variants a,b] [--reps 30] [--profile quick]
"""

from __future__ import annotations

import pandas as pd

from lab.kernel_variants import VARIANTS
from lab.variants import ENV_VARIANT, set_variant
from suite.experiments.kernels import bench

_harness_impl = bench._impl


def _impl(name: str, static: bool = False):
    base_name, _, variant = name.partition("@")
    if not base_name.startswith("fused"):
        return _harness_impl(name, static)
    run = _harness_impl(base_name, static)
    v = variant or ENV_VARIANT

    def with_variant(x, e):
        set_variant(v)
        return run(x, e)

    return with_variant


BASELINES = {"bfloat16": ("eager", "compile-eager"), "float32": ("wan-eager", "compile-wan")}
HOST_PATHS = {"fused-slices": "slices"}  # the same kernels, another autograd path: a table column


def variant_table(rows) -> pd.DataFrame:
    """Per (op, dtype, B, D, N, output dtype): % of copy bandwidth of the default fused kernel
    and of each variant ("fused@v"), the best variant, its speedup over the default and over the
    baselines with the same output semantics (bf16 out: eager, compile-eager; fp32 out: the Wan
    path and its torch.compile). `rows` are summary_row dicts (or a DataFrame of them)."""
    t = pd.DataFrame(rows)
    t = t[t.impl.str.startswith("fused") & ~t.impl.str.contains("dtile")].copy()
    t["variant"] = t.impl.map(lambda n: n.partition("@")[2] or HOST_PATHS.get(n, "default"))
    # fp32 x: "fused" and "fused-f32out" are the same op (fp32 out); keep the plain one
    t = t.sort_values("impl", key=lambda s: s.str.contains("f32out"), kind="stable")
    t = t.drop_duplicates(["op", "dtype", "B", "D", "N", "out_dtype", "variant"])
    keys = ["op", "dtype", "B", "D", "N", "out_dtype"]
    base = pd.DataFrame(rows)
    out = []
    for k, g in t.groupby(keys, sort=True):
        rec = dict(zip(keys, k))
        by = g.set_index("variant")
        for v in by.index:
            rec[v] = round(float(by.loc[v, "pct_copy_bw"]), 1)
        best = by.ms_median.idxmin()
        rec["best"] = best
        if "default" in by.index:
            rec["best_x_default"] = round(by.ms_median["default"] / by.ms_median[best], 3)
        sem = "float32" if rec["out_dtype"] == "float32" else "bfloat16"
        for b in BASELINES[sem]:
            sel = base[
                (base.impl == b)
                & (base.op == rec["op"])
                & (base.dtype == rec["dtype"])
                & (base.B == rec["B"])
                & (base.D == rec["D"])
                & (base.N == rec["N"])
            ]
            if not sel.empty:
                rec[f"x_{b}"] = round(float(sel.ms_median.iloc[0]) / by.ms_median[best], 2)
        hb = int(g.host_bound_reps.sum()) if "host_bound_reps" in g else 0
        rec["host_bound_reps"] = hb
        out.append(rec)
    return pd.DataFrame(out)


def variant_impls(op: str, variants) -> list[str]:
    """The fused impls a variant sweep times for `op`: default and each variant that changes the
    op's kernel (a field fwd_*/bwd_* in VARIANTS; unknown names by their prefix), bf16 and fp32
    output."""

    def changes(v: str) -> bool:
        fields = VARIANTS.get(v)
        return v.startswith(op) if fields is None else any(k.startswith(op) for k in fields)

    vs = [v for v in variants if v != "default" and changes(v)]
    return [f"{f}{'@' + v if v else ''}" for f in ("fused", "fused-f32out") for v in ["", *vs]]


def main(argv=None) -> None:
    """python -m lab.variant_sweep --out DIR [--variants a,b] [--reps 30]: the quick grid (plus bf16
    N = 16384) for every kernel variant against the default fused kernel and the baselines;
    writes DIR/variants_timings.csv and DIR/variants_samples.csv and prints the table last.
    --profile full|reference takes the kernels experiment's grid instead, --widths and --ops
    narrow it (a variant that matters at some shapes only, measured at all of them)."""
    import argparse
    from pathlib import Path

    from suite.experiments.kernels import WAN_WIDTHS, grid

    ap = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--baselines", default="eager,wan-eager,compile-eager,compile-wan")
    ap.add_argument("--profile", choices=("quick", "reference", "full"), default="quick")
    ap.add_argument("--widths", default="", help="only these D, e.g. 3072 (default: all)")
    ap.add_argument("--ops", default="fwd,bwd", help="fwd, bwd or both")
    a = ap.parse_args(argv)
    variants = [v for v in a.variants.split(",") if v]
    for v in variants:
        if v not in VARIANTS:
            raise SystemExit(f"unknown variant {v!r}; known: {sorted(VARIANTS)}")
    shapes = grid(a.profile)
    if a.profile == "quick":
        shapes += [(1, 16384, D, "bfloat16") for D in WAN_WIDTHS]
    widths = {int(w) for w in a.widths.split(",") if w}
    shapes = [s for s in shapes if not widths or s[2] in widths]
    ops = {o for o in a.ops.split(",") if o}
    if not shapes or not ops <= {"fwd", "bwd"} or not ops:
        raise SystemExit(f"nothing to time: --widths {a.widths!r}, --ops {a.ops!r} (fwd, bwd)")
    base = [b for b in a.baselines.split(",") if b]
    fwd = variant_impls("fwd", variants) + base if "fwd" in ops else []
    bwd = variant_impls("bwd", variants) + base if "bwd" in ops else []
    bench._impl = _impl  # the harness's impls, plus fused@variant
    raw, rows = bench.measure(shapes, fwd, bwd, a.reps)
    a.out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(a.out / "variants_timings.csv", index=False)
    pd.DataFrame(raw).to_csv(a.out / "variants_samples.csv", index=False)
    tab = variant_table(rows)
    tab.to_csv(a.out / "variants_table.csv", index=False)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 40)
    print(
        "% of copy bandwidth (fwd) / of the byte floor (bwd) per kernel variant; best_x_default ="
    )
    print("median-time speedup of the best variant over the default; x_<baseline> = best vs that")
    print(tab.to_string(index=False))


if __name__ == "__main__":
    main()
