"""Is the quick reference's slow kernel row the GPU's state after the shapes experiment?

lab/LOG.md, "Next measurements" item 4: in `nox -s reproduce` the bf16-y forward at
D = 1536, B = 1, N = 65536 and the same-size copy timed beside it both run ~10% slower than in the
full grid. Reproduce runs the shapes experiment (the real model, tens of GB) in the same process
before the kernels experiment. One process per mode, on one GPU:

    python lab/kernels_after_shapes.py --mode alone --out DIR       # the kernels grid only
    python lab/kernels_after_shapes.py --mode asis --out DIR        # shapes, then kernels
    python lab/kernels_after_shapes.py --mode keep-cache --out DIR  # ... no per-shape empty_cache
    python lab/kernels_after_shapes.py --mode settle --out DIR      # ... 0.5 s of copies after
                                                                      #     each shape's allocations

Measured on one H200 at 9b61812 (reports/reference/h200/variants/item4/): asis reproduced it,
keep-cache and settle removed it, so bench.measure now settles before every shape by default.

Writes DIR/<mode>.csv (kernels.csv's columns, the quick grid) and prints the N = 65536 forward
rows with their same-size copy last.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

MODES = ("alone", "asis", "keep-cache", "settle")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=MODES, required=True)
    ap.add_argument("--out", type=Path, required=True, help="folder for <mode>.csv")
    ap.add_argument("--settle-ms", type=float, default=500.0, help="--mode settle's copy time")
    a = ap.parse_args(argv)

    import pandas as pd
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("kernels_after_shapes.py: needs a CUDA GPU (none found)")
    from suite.experiments import kernels
    from suite.experiments.costmodel import sweep as shapes
    from suite.experiments.kernels import bench
    from suite.rundir import RunContext, RunDir

    a.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if a.mode != "alone":
        ctx = RunContext(run=RunDir(a.out / f".run-{a.mode}"), profile="quick", device="cuda")
        shapes.run(ctx)
        print(f"shapes experiment done in {time.time() - t0:.0f} s", flush=True)
    _, rows = bench.measure(
        kernels.grid("quick"),
        kernels.FWD_IMPLS,
        kernels.BWD_IMPLS,
        30,
        settle_ms=a.settle_ms if a.mode == "settle" else 0.0,
        empty_cache=a.mode != "keep-cache",
    )
    t = pd.DataFrame(rows)
    t.to_csv(a.out / f"{a.mode}.csv", index=False)
    sel = t[(t.op == "fwd") & (t.N == 65536) & t.impl.str.startswith("fused")]
    cols = ["impl", "D", "dtype", "out_dtype", "ms_median", "pct_copy_bw", "copy_same_gbps"]
    print(f"mode {a.mode}, {time.time() - t0:.0f} s")
    print(sel[cols].to_string(index=False))


if __name__ == "__main__":
    main()
