"""How fast can the GPU move the fp32-out forward's bytes at all? (docs/perf-notes.md, C11)

The fp32-out forward reads x in bf16 and writes y in fp32: a third of its bytes read, two thirds
written. The kernel issue's target is a fraction of a plain copy (half read, half written). This
times, L2-cold with the suite's Timer, beside each other in one process:
  - copy:    a same-size bf16 -> bf16 copy of x ([B, N, D]), and the 2 GB copy;
  - convert: torch's bf16 -> fp32 conversion of x (y = x.float(): the op's exact read/write mix);
  - fused:   the fused fp32-out forward itself (per-sample modulation, as the kernel grid).
Usage (GPU): python tools/mixed_copy.py [--out DIR] [--widths 1536,3072,5120] [--n 65536]
Prints a table and writes DIR/mixed_copy.csv.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path


def _cases(x, e) -> dict:
    """name -> (timed function, bytes it moves) for one input x [B, N, D] in bf16."""
    import torch

    from suite.ops.adaln import adaln

    same = torch.empty_like(x)
    f32 = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    return {
        "copy": (lambda _: same.copy_(x), 2 * x.nbytes),
        "convert": (lambda _: f32.copy_(x), x.nbytes + f32.nbytes),
        "fused": (
            lambda _: adaln(x, e[:, 1:2], e[:, 0:1], out_dtype=torch.float32),
            x.nbytes + f32.nbytes,
        ),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="folder for mixed_copy.csv")
    ap.add_argument("--widths", default="1536,3072,5120", help="D values, comma-separated")
    ap.add_argument("--n", type=int, default=65536, help="sequence length N (B = 1)")
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args(argv)

    import pandas as pd
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("mixed_copy.py: needs a CUDA GPU (none found)")
    from suite.ops import bench

    timer = bench.Timer(a.reps)
    copy_gbps, _ = bench.copy_bandwidth(timer)
    rows = []
    for D in (int(d) for d in a.widths.split(",")):
        g = torch.Generator(device="cuda").manual_seed(D)
        x = torch.randn(1, a.n, D, device="cuda", generator=g).to(torch.bfloat16)
        e = torch.randn(1, 6, D, device="cuda", generator=g) * 0.5
        bench.settle(x.nbytes, bench.SETTLE_MS)
        cases = _cases(x, e)
        for name, (fn, nbytes) in cases.items():
            ms = statistics.median(timer.time(fn))
            gbps = nbytes / (ms * 1e-3) / 1e9
            rows.append(
                dict(
                    case=name,
                    D=D,
                    N=a.n,
                    bytes=nbytes,
                    ms_median=ms,
                    gbps=gbps,
                    pct_copy_bw=100 * gbps / copy_gbps,
                    copy_gbps=copy_gbps,
                )
            )
    t = pd.DataFrame(rows)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        t.to_csv(a.out / "mixed_copy.csv", index=False)
    print(f"2 GB copy: {copy_gbps:.0f} GB/s")
    print(t.pivot(index="D", columns="case", values="pct_copy_bw").round(1).to_string())


if __name__ == "__main__":
    main()
