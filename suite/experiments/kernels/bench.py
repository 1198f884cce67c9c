"""Timing harness for the AdaLN op and its baselines (used by suite.experiments.kernels and by the
tuning lab's variant sweep, lab/variant_sweep.py).

Each timed repetition: flush L2 by writing a 512 MB buffer, spin the GPU (torch.cuda._sleep) so
the host has queued the timed call before the GPU gets there, then time the call alone between
two CUDA events. The spin is at least ~1 ms (2e6 cycles) and at least `margin` (2x) the host
time the call took to enqueue in warm-up, so a call with a slow host path (the custom op's
Python autograd backward, ~0.5 ms) is still timed on the GPU only; every repetition's host
enqueue time is recorded and a repetition whose host time exceeded the spin is counted in
`host_bound_reps` (its event pair may include a host gap). A fixed spin short of a call's
host time lets the host path into the GPU timing (the custom-op backward at N <= 16384).

Impl names: "fused", "fused-f32out", "fused-dtile", "fused-dtile-f32out" (lab/variant_sweep.py adds
kernel variants, "fused@<variant>"); "fused-slices", the fused op
with e's gradient through autograd's slice backward (the general path); the baselines "eager",
"wan-eager", "compile-eager", "compile-wan".
"""

from __future__ import annotations

import contextlib
import functools
import math
import statistics
import time

import torch

from suite.experiments.kernels.traffic import bytes_model
from suite.ops import adaln
from suite.ops.baselines import eager_adaln, pin_width, wan_adaln
from suite.ops.fused_adaln.args import slice_gradients
from suite.timing import CudaSpan, cuda_event_median_ms

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
    graph; N (dim 1) is dynamic so one graph serves every sequence length of a width (B and D
    static: baselines.pin_width); `static` compiles for the exact shape instead."""
    fused = {
        "fused": {},
        "fused-f32out": {"out_dtype": torch.float32},
        "fused-dtile": {"backward": "dtile"},
        "fused-dtile-f32out": {"out_dtype": torch.float32, "backward": "dtile"},
        "fused-slices": {},
    }
    if name in fused:
        kw = fused[name]

        def run(x, e):
            with slice_gradients() if name == "fused-slices" else contextlib.nullcontext():
                return adaln(x, e[:, 1:2], e[:, 0:1], **kw)

        return run
    if name in ("eager", "wan-eager"):
        base = eager_adaln if name == "eager" else wan_adaln
        return lambda x, e: base(x, e[:, 1:2], e[:, 0:1])
    base = {"compile-eager": eager_adaln, "compile-wan": wan_adaln}[name]
    if static:
        return torch.compile(lambda x, e: base(x, e[:, 1:2], e[:, 0:1]), dynamic=False)
    return _dynamic(name)


@functools.cache
def _dynamic(name: str, backend: str = "inductor"):
    base = {"compile-eager": eager_adaln, "compile-wan": wan_adaln}[name]
    g = torch.compile(lambda x, e: base(x, e[:, 1:2], e[:, 0:1]), fullgraph=True, backend=backend)

    def f(x, e):
        pin_width(x, e)  # N dynamic, B and D static: one graph per width, as in a model
        return g(x, e)

    return f


def spin_cycles(
    host_ms: float, cycles_per_ms: float, min_cycles: int, margin: float = 2.0, max_ms: float = 20.0
) -> int:
    """GPU spin before a timed call: `margin` times the host enqueue time, at least min_cycles,
    at most max_ms (a pathological host time must not make the sweep take hours)."""
    want = margin * max(0.0, host_ms) * cycles_per_ms
    return int(min(max(float(min_cycles), want), max_ms * cycles_per_ms))


class Timer:
    """flush: "write" zeroes the buffer (L2 ends full of dirty lines, written back to HBM while
    the timed call runs); "read" reads it (L2 ends full of clean lines, earlier dirty lines
    written back before timing). lab/timing_protocol.py measures the difference."""

    def __init__(
        self,
        reps: int,
        flush_mb: int = 512,
        sleep_cycles: int = 2_000_000,
        margin: float = 2.0,
        flush: str = "write",
    ):
        if flush not in ("write", "read"):
            raise ValueError(f"Timer(flush={flush!r}): expected 'write' or 'read'")
        self.reps, self.sleep, self.margin, self.flush_mode = reps, sleep_cycles, margin, flush
        self.flush = torch.zeros(flush_mb * 2**20, dtype=torch.uint8, device="cuda")
        self._cpm: float | None = None
        self.last: dict = {}  # spin_ms and per-repetition host_ms of the last time() call

    def cycles_per_ms(self) -> float:
        """torch.cuda._sleep cycles per millisecond on this GPU (measured once, median of 5)."""
        if self._cpm is None:
            n = 1_000_000
            _, ms = cuda_event_median_ms(lambda: torch.cuda._sleep(n), warmup=1, repeat=5)
            self._cpm = statistics.median(n / m for m in ms)
        return self._cpm

    def time(self, fn, setup=None, warmup: int = 3) -> list[float]:
        """Milliseconds of fn() per repetition; setup() (untimed) runs before each."""
        host = []
        for _ in range(max(2, warmup)):
            arg = setup() if setup else None
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn(arg)
            host.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize()
        cpm = self.cycles_per_ms()
        cycles = spin_cycles(max(host[1:]), cpm, self.sleep, self.margin)  # [0]: first call
        spans, host_ms = [], []
        for _ in range(self.reps):
            arg = setup() if setup else None
            if self.flush_mode == "write":
                self.flush.zero_()
            else:
                self.flush.view(torch.int32).sum()  # reads 512 MB, writes 8 bytes
            torch.cuda._sleep(cycles)
            span = CudaSpan()
            t0 = time.perf_counter()
            with span:
                fn(arg)
            host_ms.append((time.perf_counter() - t0) * 1e3)
            spans.append(span)
        torch.cuda.synchronize()
        self.last = dict(spin_ms=cycles / cpm, host_ms=host_ms)
        return [span.ms() for span in spans]


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


def summary_row(
    key: dict,
    ms: list[float],
    nbytes: int,
    copy_gbps: float,
    compile_mode: str = "",
    spin_ms: float = math.nan,
    host_ms=(),
    copy_same_gbps: float = math.nan,
) -> dict:
    """One row of kernels.csv from the repetitions `ms` of one (impl, op, shape). copy_same_gbps:
    a copy of the row's own byte count under the same protocol (the ceiling at this size, where
    the 2 GB copy's is the asymptote)."""
    med = statistics.median(ms)
    q = statistics.quantiles(ms, n=4) if len(ms) > 1 else [med, med, med]
    gbps = nbytes / (med * 1e-3) / 1e9
    host_ms = list(host_ms)
    return dict(
        **key,
        ms_median=med,
        gbps=gbps,
        pct_copy_bw=100 * gbps / copy_gbps,
        copy_gbps=copy_gbps,
        ms_p25=q[0],
        ms_p75=q[2],
        reps=len(ms),
        bytes=nbytes,
        compile_mode=compile_mode,
        spin_ms=spin_ms,
        host_ms_median=statistics.median(host_ms) if host_ms else math.nan,
        host_bound_reps=sum(h > spin_ms for h in host_ms) if host_ms else 0,
        copy_same_gbps=copy_same_gbps,
        pct_copy_same=100 * gbps / copy_same_gbps,
    )


# Before each shape's first timing: after reproduce's shapes experiment (tens of GB of model
# activations), the first shape allocated after an empty_cache ran 10% slower, the op and a copy
# alike, for its whole measurement; half a second of copies first removes it
# (lab/kernels_after_shapes.py measures it).
SETTLE_MS = 500.0


def settle(nbytes: int, ms: float) -> None:
    """Copy nbytes back and forth on the GPU for about `ms` of wall time."""
    src = torch.empty(max(1, nbytes), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t = time.perf_counter()
    while (time.perf_counter() - t) * 1e3 < ms:
        dst.copy_(src)
        torch.cuda.synchronize()


def measure(
    shapes, fwd_impls, bwd_impls, reps: int, log=print, settle_ms=SETTLE_MS, empty_cache=True
):
    """Times every impl at every shape; see the module docstring. settle_ms: copies before each
    shape (SETTLE_MS); empty_cache after each."""
    torch._dynamo.config.cache_size_limit = 64
    timer = Timer(reps)
    copy_gbps, copy_ms = copy_bandwidth(timer)
    log(f"copy bandwidth {copy_gbps:.0f} GB/s")
    raw = [
        dict(impl="copy", op="copy", B=0, N=0, D=0, dtype="uint8", out_dtype="uint8", rep=i, ms=m)
        for i, m in enumerate(copy_ms)
    ]
    rows = []
    copy_same = {}  # bytes -> GB/s of a copy moving them (half read, half written)
    for B, N, D, dtn in shapes:
        dt = DT[dtn]
        g = torch.Generator(device="cuda").manual_seed(B * N + D)
        x = torch.randn(B, N, D, device="cuda", generator=g).to(dt)
        e = torch.randn(B, 6, D, device="cuda", generator=g) * 0.5  # Wan: fp32 [B, 6, D]
        if settle_ms:
            settle(x.nbytes, settle_ms)
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
                last = dict(timer.last)  # before the reference copy below replaces it
                out_dt = torch.float32 if name.partition("@")[0] in F32_OUT else dt
                sy = torch.empty((), dtype=out_dt).element_size()
                nbytes = bytes_model(op, B, N, D, x.element_size(), sy)
                if nbytes not in copy_same:
                    copy_same[nbytes] = copy_bandwidth(timer, nbytes // 2)[0]
                key = dict(impl=name, op=op, B=B, N=N, D=D, dtype=dtn, out_dtype=NAMES[out_dt])
                row = summary_row(
                    key,
                    ms,
                    nbytes,
                    copy_gbps,
                    mode,
                    last.get("spin_ms", math.nan),
                    last.get("host_ms", ()),
                    copy_same[nbytes],
                )
                rows.append(row)
                med, gbps = row["ms_median"], row["gbps"]
                hms = list(last.get("host_ms", ())) or [math.nan] * len(ms)
                raw += [
                    dict(**key, rep=i, ms=m, host_ms=h) for i, (m, h) in enumerate(zip(ms, hms))
                ]
                log(
                    f"{op} {name:18s} B={B} N={N:6d} D={D} {dtn:8s} {med * 1e3:9.1f} us "
                    f"{gbps:7.0f} GB/s {100 * gbps / copy_gbps:5.1f}% of copy"
                    + (f" HOST-BOUND x{row['host_bound_reps']}" if row["host_bound_reps"] else "")
                )
        if empty_cache:
            torch.cuda.empty_cache()
    return raw, rows
