"""Timing harness for the AdaLN op and its baselines (used by suite.experiments.kernels).

Each timed repetition: flush L2 by writing a 512 MB buffer, spin the GPU ~0.3 ms
(torch.cuda._sleep) so the host has queued the timed call before the GPU gets there (launch
overhead stays out of the number), then time the call alone between two CUDA events.
"""

from __future__ import annotations

import statistics

import torch

from suite.ops import adaln
from suite.ops.baselines import compiled, eager_adaln, wan_adaln

DT = {"bfloat16": torch.bfloat16, "float32": torch.float32}
F32_OUT = ("fused-f32out", "fused-dtile-f32out", "wan-eager", "compile-wan")  # impls whose output is fp32
NAMES = {torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float16: "float16"}


def _impl(name: str):
    """name -> (fn(x, scale, shift) -> y). Compiled baselines mark N (dim 1) dynamic so one graph
    serves every sequence length of a width (D stays static, as in a real model)."""
    if name == "fused":
        return lambda x, s, h: adaln(x, s, h)
    if name == "fused-f32out":
        return lambda x, s, h: adaln(x, s, h, out_dtype=torch.float32)
    if name == "fused-dtile":
        return lambda x, s, h: adaln(x, s, h, backward="dtile")
    if name == "fused-dtile-f32out":
        return lambda x, s, h: adaln(x, s, h, out_dtype=torch.float32, backward="dtile")
    if name == "eager":
        return eager_adaln
    if name == "wan-eager":
        return wan_adaln
    base = {"compile-eager": "eager", "compile-wan": "wan"}[name]

    def f(x, s, h):
        torch._dynamo.mark_dynamic(x, 1)
        return compiled(base)(x, s, h)

    return f


class Timer:
    def __init__(self, reps: int, flush_mb: int = 512, sleep_cycles: int = 600_000):
        self.reps, self.sleep = reps, sleep_cycles
        self.flush = torch.empty(flush_mb * 2**20, dtype=torch.uint8, device="cuda")

    def time(self, fn, setup=None, warmup: int = 3) -> list[float]:
        """Milliseconds of fn() per repetition; setup() (untimed) runs before each."""
        for _ in range(warmup):
            arg = setup() if setup else None
            fn(arg)
        torch.cuda.synchronize()
        ev = []
        for _ in range(self.reps):
            arg = setup() if setup else None
            self.flush.zero_()
            torch.cuda._sleep(self.sleep)
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(arg)
            b.record()
            ev.append((a, b))
        torch.cuda.synchronize()
        return [a.elapsed_time(b) for a, b in ev]


def copy_bandwidth(timer: Timer, nbytes: int = 2 * 2**30) -> tuple[float, list[float]]:
    """Device-to-device copy, bytes read + written over the median time, in GB/s."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    ms = timer.time(lambda _: dst.copy_(src))
    return 2 * nbytes / (statistics.median(ms) * 1e-3) / 1e9, ms


def measure(shapes, fwd_impls, bwd_impls, reps: int, log=print):
    from suite.experiments.kernels import bytes_model

    torch._dynamo.config.cache_size_limit = 64
    timer = Timer(reps)
    copy_gbps, copy_ms = copy_bandwidth(timer)
    log(f"copy bandwidth {copy_gbps:.0f} GB/s")
    raw = [dict(impl="copy", op="copy", B=0, N=0, D=0, dtype="uint8", out_dtype="uint8", rep=i,
                ms=m) for i, m in enumerate(copy_ms)]
    rows = []
    for B, N, D, dtn in shapes:
        dt = DT[dtn]
        g = torch.Generator(device="cuda").manual_seed(B * N + D)
        x = torch.randn(B, N, D, device="cuda", generator=g).to(dt)
        e = torch.randn(B, 6, D, device="cuda", generator=g) * 0.5  # Wan: fp32 [B, 6, D]
        shift, scale = e[:, 0:1], e[:, 1:2]
        for op, impls in (("fwd", fwd_impls), ("bwd", bwd_impls)):
            for name in impls:
                fn = _impl(name)
                if op == "fwd":
                    ms = timer.time(lambda _, fn=fn, x=x, s=scale, h=shift: fn(x, s, h))
                else:
                    xg = x.detach().requires_grad_(True)
                    eg = e.detach().requires_grad_(True)

                    def setup(fn=fn, xg=xg, eg=eg):
                        y = fn(xg, eg[:, 1:2], eg[:, 0:1])
                        return y, torch.ones_like(y) * 1e-3

                    def back(arg, xg=xg, eg=eg):
                        torch.autograd.grad(arg[0], (xg, eg), arg[1])

                    ms = timer.time(back, setup)
                out_dt = torch.float32 if name in F32_OUT else dt
                sy = torch.empty((), dtype=out_dt).element_size()
                nbytes = bytes_model(op, B, N, D, x.element_size(), sy)
                med = statistics.median(ms)
                q = statistics.quantiles(ms, n=4)
                gbps = nbytes / (med * 1e-3) / 1e9
                key = dict(impl=name, op=op, B=B, N=N, D=D, dtype=dtn, out_dtype=NAMES[out_dt])
                rows.append(dict(**key, ms_median=med, gbps=gbps, pct_copy_bw=100 * gbps / copy_gbps,
                                 copy_gbps=copy_gbps, ms_p25=q[0], ms_p75=q[2], reps=len(ms),
                                 bytes=nbytes))
                raw += [dict(**key, rep=i, ms=m) for i, m in enumerate(ms)]
                log(f"{op} {name:14s} B={B} N={N:6d} D={D} {dtn:8s} {med * 1e3:9.1f} us "
                    f"{gbps:7.0f} GB/s {100 * gbps / copy_gbps:5.1f}% of copy")
        torch.cuda.empty_cache()
    return raw, rows
