"""Bandwidth check of the fused AdaLN kernels at long sequences: bf16 x, Wan's fp32 [1, 6, D]
modulation, forward and forward+backward (x's and the modulation's gradients), B = 1, N = 65536
and 75600, D = 1536 / 3072 / 5120, as % of a measured 2 GB device copy in the same process
(suite.experiments.kernels.bench's protocol: L2 flushed before each repetition, GPU spin, CUDA events; bytes
from suite.experiments.kernels.traffic). The roofline target: >= 90% of the copy.

    python -m lab.ops.bandwidth_check [--out DIR] [--reps 15]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

NS = (65536, 75600)
WIDTHS = (1536, 3072, 5120)
TARGET_PCT = 90.0


def rows(reps: int) -> list[dict]:
    import torch

    from suite.experiments.kernels.bench import Timer, _impl, _time_one, copy_bandwidth
    from suite.experiments.kernels.traffic import bytes_model

    timer = Timer(reps)
    copy_gbps, _ = copy_bandwidth(timer)
    fn = _impl("fused")
    out = []
    for N in NS:
        for D in WIDTHS:
            x = torch.randn(1, N, D, device="cuda", dtype=torch.bfloat16)
            e = torch.randn(1, 6, D, device="cuda")
            for op in ("fwd", "bwd"):
                with torch.no_grad() if op == "fwd" else torch.enable_grad():
                    ms = statistics.median(_time_one(timer, fn, op, x, e))
                nbytes = bytes_model(op, 1, N, D, 2, 2)
                gbps = nbytes / (ms * 1e-3) / 1e9
                pct = 100 * gbps / copy_gbps
                out.append(
                    dict(
                        op=op,
                        B=1,
                        N=N,
                        D=D,
                        dtype="bfloat16",
                        us_median=ms * 1e3,
                        bytes=nbytes,
                        gbps=gbps,
                        copy_gbps=copy_gbps,
                        pct_copy=pct,
                        reps=reps,
                        ok=pct >= TARGET_PCT,
                    )  # fmt: skip
                )
            del x, e
            torch.cuda.empty_cache()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__)
    ap.formatter_class = argparse.RawDescriptionHelpFormatter
    ap.add_argument("--out", type=Path, help="folder for bandwidth.csv")
    ap.add_argument("--reps", type=int, default=15, help="timed repetitions per case")
    a = ap.parse_args(argv)
    import pandas as pd
    import torch

    if not torch.cuda.is_available():
        print("not run: needs a CUDA GPU")
        return 0
    df = pd.DataFrame(rows(a.reps))
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        df.to_csv(a.out / "bandwidth.csv", index=False)
    print(
        df[["op", "N", "D", "us_median", "gbps", "pct_copy", "ok"]].round(1).to_string(index=False)
    )
    return 0 if df.ok.all() else 1


if __name__ == "__main__":
    raise SystemExit(main())
