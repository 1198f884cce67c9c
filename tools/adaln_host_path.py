"""Host cost of one fused AdaLN call (docs/perf-notes.md, "The op's host path").

GPU: bf16 x [1, N, D] with Wan's per-sample modulation, no grad: one call then synchronise, 100
calls then synchronise (per call), and CUDA events around 100 back-to-back calls (the GPU time).
CPU (no GPU): the op's CPU path against the same math in plain eager, on a tiny row, so the
difference is the op's Python and dispatch layers.

    python tools/adaln_host_path.py [--d 1536] [--n 65536]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def per_call_us(fn, n: int, sync=lambda: None) -> float:
    sync()
    t = time.perf_counter()
    for _ in range(n):
        fn()  # outputs are dropped each iteration, so the allocator reuses their memory
    sync()
    return (time.perf_counter() - t) / n * 1e6


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=1536)
    ap.add_argument("--n", type=int, default=65536)
    a = ap.parse_args(argv)

    import torch
    import torch.nn.functional as F

    from suite.ops import adaln

    if not torch.cuda.is_available():
        x, e = torch.randn(1, 4, 64), torch.randn(1, 6, 64)
        s, h = e[:, 1:2], e[:, 0:1]
        with torch.no_grad():
            for _ in range(200):
                adaln(x, s, h)
            op = per_call_us(lambda: adaln(x, s, h), 3000)
            plain = per_call_us(lambda: F.layer_norm(x, (64,), eps=1e-6) * (1 + s) + h, 3000)
        print(f"CPU, x [1, 4, 64]: op {op:.1f} us/call, plain eager {plain:.1f} us/call")
        return

    x = torch.randn(1, a.n, a.d, device="cuda", dtype=torch.bfloat16)
    e = torch.randn(1, 6, a.d, device="cuda")
    s, h = e[:, 1:2], e[:, 0:1]
    sync = torch.cuda.synchronize
    with torch.no_grad():
        for _ in range(20):
            adaln(x, s, h)
        one = per_call_us(lambda: adaln(x, s, h), 1, sync)
        many = per_call_us(lambda: adaln(x, s, h), 100, sync)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(100):
            adaln(x, s, h)
        e1.record()
        sync()
    print(
        f"GPU, bf16 x [1, {a.n}, {a.d}]: one call then sync {one:.1f} us; 100 calls then sync "
        f"{many:.1f} us/call; CUDA events over 100 back-to-back calls {e0.elapsed_time(e1) * 10:.1f} us/call"
    )


if __name__ == "__main__":
    main()
