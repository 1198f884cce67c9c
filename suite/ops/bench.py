"""Timing harness for the AdaLN op and its baselines (used by suite.experiments.kernels).

Each timed repetition: flush L2 by writing a 512 MB buffer, spin the GPU ~1 ms
(torch.cuda._sleep, 2e6 cycles) so the host has queued the timed call before the GPU gets there
(host overhead stays out of the number), then time the call alone between two CUDA events.
The committed reference run (reports/reference/h200, commit 75c22db) used a 0.3 ms spin, which
hid the forward's host overhead but not the custom-op backward's at N <= 16384.
"""

from __future__ import annotations

import functools
import statistics

import torch

from suite.ops import adaln
from suite.ops.baselines import eager_adaln, wan_adaln

DT = {"bfloat16": torch.bfloat16, "float32": torch.float32}
F32_OUT = (
    "fused-f32out",
    "fused-dtile-f32out",
    "wan-eager",
    "compile-wan",
)  # impls whose output is fp32
NAMES = {torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float16: "float16"}


def _impl(name: str, static: bool = False):
    """name -> fn(x, e) with e the Wan modulation tensor [B, 6, D] (shift = e[:, 0], scale =
    e[:, 1], taken as strided [B, 1, D] views, as Wan does). Compiled baselines chunk e inside the
    graph and mark N (dim 1) dynamic so one graph serves every sequence length of a width (D stays
    static, as in a real model); `static` compiles for the exact shape instead."""
    fused = {
        "fused": {},
        "fused-f32out": {"out_dtype": torch.float32},
        "fused-dtile": {"backward": "dtile"},
        "fused-dtile-f32out": {"out_dtype": torch.float32, "backward": "dtile"},
    }
    if name in fused:
        kw = fused[name]
        return lambda x, e: adaln(x, e[:, 1:2], e[:, 0:1], **kw)
    if name in ("eager", "wan-eager"):
        base = eager_adaln if name == "eager" else wan_adaln
        return lambda x, e: base(x, e[:, 1:2], e[:, 0:1])
    base = {"compile-eager": eager_adaln, "compile-wan": wan_adaln}[name]
    if static:
        return torch.compile(lambda x, e: base(x, e[:, 1:2], e[:, 0:1]), dynamic=False)
    return _dynamic(name)


@functools.cache
def _dynamic(name: str):
    base = {"compile-eager": eager_adaln, "compile-wan": wan_adaln}[name]
    g = torch.compile(lambda x, e: base(x, e[:, 1:2], e[:, 0:1]), fullgraph=True)

    def f(x, e):
        torch._dynamo.mark_dynamic(x, 1)
        return g(x, e)

    return f


class Timer:
    def __init__(self, reps: int, flush_mb: int = 512, sleep_cycles: int = 2_000_000):
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


def _time_one(timer: Timer, fn, op: str, x, e) -> list[float]:
    if op == "fwd":
        return timer.time(lambda _: fn(x, e))
    xg = x.detach().requires_grad_(True)
    eg = e.detach().requires_grad_(True)

    def setup():
        y = fn(xg, eg)
        return y, torch.full_like(y, 1e-3)

    return timer.time(lambda arg: torch.autograd.grad(arg[0], (xg, eg), arg[1]), setup)


def measure(shapes, fwd_impls, bwd_impls, reps: int, log=print):
    from suite.experiments.kernels import bytes_model

    torch._dynamo.config.cache_size_limit = 64
    timer = Timer(reps)
    copy_gbps, copy_ms = copy_bandwidth(timer)
    log(f"copy bandwidth {copy_gbps:.0f} GB/s")
    raw = [
        dict(impl="copy", op="copy", B=0, N=0, D=0, dtype="uint8", out_dtype="uint8", rep=i, ms=m)
        for i, m in enumerate(copy_ms)
    ]
    rows = []
    for B, N, D, dtn in shapes:
        dt = DT[dtn]
        g = torch.Generator(device="cuda").manual_seed(B * N + D)
        x = torch.randn(B, N, D, device="cuda", generator=g).to(dt)
        e = torch.randn(B, 6, D, device="cuda", generator=g) * 0.5  # Wan: fp32 [B, 6, D]
        for op, impls in (("fwd", fwd_impls), ("bwd", bwd_impls)):
            for name in impls:
                ms, mode = None, "dynamic-N" if name.startswith("compile") else ""
                for static in (False, True) if mode else (False,):
                    try:
                        ms = _time_one(timer, _impl(name, static), op, x, e)
                        break
                    except Exception as exc:  # a torch.compile failure must not end the sweep
                        log(
                            f"{op} {name} B={B} N={N} D={D} {dtn} failed ({'static' if static else mode}): "
                            f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                        )
                        mode = "static"
                if ms is None:
                    continue
                out_dt = torch.float32 if name in F32_OUT else dt
                sy = torch.empty((), dtype=out_dt).element_size()
                nbytes = bytes_model(op, B, N, D, x.element_size(), sy)
                med = statistics.median(ms)
                q = statistics.quantiles(ms, n=4)
                gbps = nbytes / (med * 1e-3) / 1e9
                key = dict(impl=name, op=op, B=B, N=N, D=D, dtype=dtn, out_dtype=NAMES[out_dt])
                rows.append(
                    dict(
                        **key,
                        ms_median=med,
                        gbps=gbps,
                        pct_copy_bw=100 * gbps / copy_gbps,
                        copy_gbps=copy_gbps,
                        ms_p25=q[0],
                        ms_p75=q[2],
                        reps=len(ms),
                        bytes=nbytes,
                        compile_mode=mode,
                    )
                )
                raw += [dict(**key, rep=i, ms=m) for i, m in enumerate(ms)]
                log(
                    f"{op} {name:18s} B={B} N={N:6d} D={D} {dtn:8s} {med * 1e3:9.1f} us "
                    f"{gbps:7.0f} GB/s {100 * gbps / copy_gbps:5.1f}% of copy"
                )
        torch.cuda.empty_cache()
    return raw, rows
