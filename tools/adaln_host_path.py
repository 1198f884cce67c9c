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
    ap.add_argument("--breakdown", action="store_true", help="host cost of each layer, cProfile")
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
    if a.breakdown:
        breakdown(x, s, h)


def breakdown(x, s, h) -> None:
    """Host cost of each layer of one call, the GPU kept busy (torch.cuda._sleep) so no enqueue
    waits: public function, custom op, fused_cuda.forward, the launch alone, its parts."""
    import cProfile
    import pstats

    import torch
    from cuda.bindings import driver

    from suite.cuda import launch as L
    from suite.ops import adaln, fused_cuda

    sc, sh = s[:, 0, :], h[:, 0, :]
    B, N, D = x.shape
    cfg = fused_cuda.config_for(x, sc, 0, x.dtype)
    func = fused_cuda._fn(cfg, cfg.fwd(True), x.device.index)
    y = torch.empty_like(x)
    st = torch.empty((B, N), device=x.device)
    args = [
        L.ptr(x),
        L.i64(x.stride(0)),
        L.i64(x.stride(1)),
        L.ptr(sc),
        L.ptr(sh),
        L.i64(sc.stride(0)),
        L.i64(0),
        L.ptr(y),
        L.ptr(st),
        L.ptr(st),
        L.i64(B * N),
        L.i64(N),
        L.f32(1e-6),
    ]
    stream = driver.CUstream(torch.cuda.current_stream().cuda_stream)
    vals, types = tuple(a[0] for a in args), tuple(a[1] for a in args)
    layers = {
        "adaln() (public function)": lambda: adaln(x, s, h),
        "torch.ops.adaln.forward (custom op)": lambda: torch.ops.adaln.forward(
            x, sc, sh, 1e-6, 0, x.dtype, "fused"
        ),
        "fused_cuda.forward": lambda: fused_cuda.forward(x, sc, sh, 1e-6, 0, x.dtype),
        "launch() (stream + packing + cuLaunchKernel)": lambda: L.launch(
            func, (8, 1, 1), 192, x.device.index, args
        ),
        "cuLaunchKernel, (values, types) given": lambda: driver.cuLaunchKernel(
            func, 8, 1, 1, 192, 1, 1, 0, stream, (vals, types), 0
        ),
        "torch.cuda.current_stream().cuda_stream": lambda: torch.cuda.current_stream().cuda_stream,
        "current_stream_handle (raw)": lambda: L.current_stream_handle(x.device.index),
        "3 x torch.empty": lambda: (
            torch.empty_like(x),
            torch.empty((B, N), device=x.device),
            torch.empty((B, N), device=x.device),
        ),
        "launch plan (cached)": lambda: fused_cuda._fwd_plan(
            x.dtype, sc.dtype, x.dtype, D, 0, True, "default", x.device.index
        ),
        "F.layer_norm (eager, for scale)": lambda: torch.nn.functional.layer_norm(x, (D,)),
    }
    print("host cost per call, GPU busy (us):")
    with torch.no_grad():
        for name, fn in layers.items():
            for _ in range(10):
                fn()
            torch.cuda.synchronize()
            torch.cuda._sleep(1_000_000_000)  # ~0.5 s of GPU work ahead of the calls
            us = per_call_us(fn, 200)
            torch.cuda.synchronize()
            print(f"  {us:8.1f}  {name}")
        torch.cuda.synchronize()
        torch.cuda._sleep(1_000_000_000)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(200):
            adaln(x, s, h)
        prof.disable()
        torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
