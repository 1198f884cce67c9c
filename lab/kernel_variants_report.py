"""Compile every benchmark variant of the fused AdaLN kernels with NVRTC (no GPU needed), read
ptxas's resource report, and print registers, spills, occupancy, bytes in flight per SM and the
predicted % of copy bandwidth (suite/ops/kernel_model.py) against the H200 reference run.

    python tools/kernel_variants_report.py [--arch sm_90] [--csv out.csv]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lab import kernel_model as km  # noqa: E402
from lab.kernel_variants import VARIANTS  # noqa: E402
from lab.variants import variant_config  # noqa: E402
from suite.cuda.compile import resources  # noqa: E402
from suite.ops.fused_adaln.cuda import KernelConfig, build  # noqa: E402

REF = ROOT / "reports" / "reference" / "h200" / "kernels-a1294db" / "kernels.csv"
SIZE = {"bf16": 2, "f16": 2, "float": 4}
NAME = {"bf16": "bfloat16", "float": "float32"}


def measured(ref, op: str, tx: str, ty: str, D: int, N: int = 65536) -> float | None:
    if ref is None:
        return None
    impl = "fused-f32out" if ty == "float" and tx != "float" else "fused"
    sel = ref[(ref.impl == impl) & (ref.op == op) & (ref.B == 1) & (ref.N == N) & (ref.D == D)]
    sel = sel[sel.dtype == NAME[tx]]
    return None if sel.empty else float(sel.pct_copy_bw.iloc[0]) / 100


def report(
    arch: str = "sm_90", widths=(1536, 3072, 5120), combos=None, variants=None
) -> list[dict]:
    try:
        import pandas as pd

        ref = pd.read_csv(REF) if REF.is_file() else None
    except ImportError:
        ref = None
    combos = combos or [("bf16", "float", "bf16"), ("bf16", "float", "float")]
    rows = []
    for tx, tm, ty in combos:
        for D in widths:
            base = KernelConfig(tx, tm, ty, D, 0)
            stats = {}
            for v in variants or VARIANTS:
                prog_cfg = variant_config(base, v)
                res = resources(build(prog_cfg, arch))
                for op in ("fwd", "bwd"):
                    if v != "default" and not any(k.startswith(op) for k in VARIANTS[v]):
                        continue
                    # the kernel that runs at the measured shape (B = 1, N = 65536 rows)
                    cfg = prog_cfg.fwd_launch(True, 65536) if op == "fwd" else prog_cfg
                    name = cfg.fwd(True) if op == "fwd" else cfg.bwd(True, True)
                    r = res[name]
                    threads = cfg.fwd_threads if op == "fwd" else cfg.bwd_threads
                    occ = km.occupancy(r["registers"], threads, r["smem"])
                    ept = cfg.fwd_elems if op == "fwd" else cfg.bwd_ept
                    rif = 2 if op == "fwd" and cfg.fwd_pair(True) else 1  # adaln_fwd_r2: 2 rows
                    bpt = km.bytes_per_thread(op, ept, cfg.vec, SIZE[tx], SIZE[ty], rif)
                    inflight = km.bytes_in_flight(occ, bpt)
                    stats[(v, op)] = inflight
                    m = measured(ref, op, tx, ty, D)
                    d0 = stats.get(("default", op))
                    pred = km.predict_fraction(m, d0, inflight) if m and d0 else None
                    rows.append(
                        dict(
                            variant=v,
                            op=op,
                            tx=tx,
                            ty=ty,
                            D=D,
                            rt=cfg.fwd_rt if op == "fwd" else cfg.bwd_rt,
                            rows=cfg.fwd_rows if op == "fwd" else cfg.bwd_rows,
                            threads=threads,
                            registers=r["registers"],
                            spill_bytes=r["spill_stores"] + r["spill_loads"],
                            stack=r["stack"],
                            ctas_per_sm=occ.ctas,
                            warps_per_sm=occ.warps,
                            limit=occ.limit,
                            bytes_per_thread=bpt,
                            inflight_kb=round(inflight / 1024, 1),
                            measured_pct=None if m is None else round(100 * m),
                            predicted_pct=None if pred is None else round(100 * pred),
                        )
                    )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--csv")
    ap.add_argument("--variants", help="comma-separated (default: every variant)")
    a = ap.parse_args()
    rows = report(
        a.arch,
        variants=list(dict.fromkeys(["default", *(v for v in a.variants.split(",") if v)]))
        if a.variants
        else None,
    )
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join("" if r[c] is None else str(r[c]) for c in cols) + " |")
    if a.csv:
        import csv

        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
