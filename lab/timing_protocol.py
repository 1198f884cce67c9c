"""How much the L2-flush protocol moves the kernel timings (lab/LOG.md, round 5).

suite.experiments.kernels.bench flushes L2 before every repetition by zeroing a 512 MB buffer: L2 is left full of
dirty lines, which the timed call then writes back to HBM while it streams its own bytes (up to
~50 MB, ~12 us at 4.3 TB/s). A 2 GB copy, the bandwidth reference, amortises that; a 100 us
kernel does not. This script times the same calls under both flushes ("write": zero the buffer,
as now; "read": read it, so L2 ends clean) and the copy at 2 GB and at each shape's own byte
count, one table last:

    python lab/timing_protocol.py [--reps 30] [--out DIR]

Needs a CUDA GPU. Columns: impl, op, B, N, D, flush, ms_median, gbps, pct_copy_2g (the suite's
metric), pct_copy_same (against a copy of the same bytes under the same flush).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHAPES = [(1, 4096, 1536), (1, 65536, 1536), (1, 65536, 3072), (1, 65536, 5120)]
IMPLS = ["fused", "compile-eager"]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", type=Path, help="write timing_protocol.csv here")
    a = ap.parse_args(argv)

    import pandas as pd
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("timing_protocol.py: needs a CUDA GPU (torch sees none)")
    from suite.experiments.kernels.bench import Timer, _impl, _time_one, copy_bandwidth
    from suite.experiments.kernels.traffic import bytes_model

    rows = []
    for flush in ("write", "read"):
        timer = Timer(a.reps, flush=flush)
        copy_2g, _ = copy_bandwidth(timer)
        for B, N, D in SHAPES:
            x = torch.randn(B, N, D, device="cuda").to(torch.bfloat16)
            e = torch.randn(B, 6, D, device="cuda") * 0.5
            for op in ("fwd", "bwd"):
                nbytes = bytes_model(op, B, N, D, 2, 2)
                copy_same, _ = copy_bandwidth(timer, nbytes=nbytes // 2)  # reads + writes nbytes
                for impl in IMPLS:
                    ms = statistics.median(_time_one(timer, _impl(impl), op, x, e))
                    gbps = nbytes / (ms * 1e-3) / 1e9
                    rows.append(
                        dict(impl=impl, op=op, B=B, N=N, D=D, flush=flush, ms_median=ms,
                             gbps=gbps, pct_copy_2g=100 * gbps / copy_2g,
                             pct_copy_same=100 * gbps / copy_same, copy_2g_gbps=copy_2g,
                             copy_same_gbps=copy_same)
                    )  # fmt: skip
                print(f"{flush} {op} B={B} N={N} D={D} done", flush=True)
    df = pd.DataFrame(rows)
    # GPU kernels per backward call (torch.profiler), the autograd glue of Wan's e views included
    x = torch.randn(1, 4096, 1536, device="cuda").to(torch.bfloat16).requires_grad_(True)
    e = (torch.randn(1, 6, 1536, device="cuda") * 0.5).requires_grad_(True)
    counts = []
    for impl in IMPLS:
        fn = _impl(impl)
        for _ in range(3):  # warm-up (compile)
            y = fn(x, e)
            torch.autograd.grad(y, (x, e), torch.ones_like(y))
        y = fn(x, e)
        dy = torch.ones_like(y)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            torch.autograd.grad(y, (x, e), dy)
            torch.cuda.synchronize()
        names = [
            ev.name for ev in prof.events() if ev.device_type == torch.autograd.DeviceType.CUDA
        ]
        print(f"{impl} bwd kernels: {len(names)}: " + "; ".join(n[:60] for n in names))
        counts += [
            dict(impl=impl, op="bwd", B=1, N=4096, D=1536, kernel=i, name=n)
            for i, n in enumerate(names)
        ]
    if a.out:
        pd.DataFrame(counts).to_csv(a.out / "kernels_per_call.csv", index=False)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        df.to_csv(a.out / "timing_protocol.csv", index=False)
    pd.set_option("display.width", 200)
    print(df.drop(columns=["copy_2g_gbps"]).round(3).to_string(index=False))


if __name__ == "__main__":
    main()
