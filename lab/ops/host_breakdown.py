"""Where the host time of one fused AdaLN call goes: each piece of the forward and of the backward
timed alone, and one fwd+bwd split at the autograd engine's seams.

    python -m lab.ops.host_bench --breakdown [--cpu] [--out DIR]

Bf16 x [B, N, 1536] with Wan's fp32 [B, 6, D] modulation (scale, shift = e[:, 1:2], e[:, 0:1]).
On a GPU every piece runs for real (the CUDA caching allocator, cuLaunchKernel, the current
stream) at the burst shapes; on the CPU (no CUDA, or --cpu) the driver is stubbed
(host_bench.stub_launches) and N = 8 rows. Two kinds of row:

  kind=piece  one piece in a loop of `calls` calls, host time only (the loop is timed, the
              synchronise after it is not), per call: min and median over `reps` loops
  kind=split  `calls` fwd+bwd calls through torch.autograd.grad, each stamped at 5 points: the
              call, the forward's return, the backward's entry and exit (a wrapper around the
              autograd.Function's backward, on the engine's device thread on a GPU) and
              autograd.grad's return; median of each segment. The same for the autograd floor
              (host_bench._Floor: allocations only), so the engine's own cost is side by side;
              then both again with the backward on the calling thread (impl "op, 1 autograd
              thread": torch.autograd.set_multithreading_enabled(False)) and with the calling
              thread and the engine's thread on one core (impl "op, 1 core"): a backward slowed
              by the hand-off or by a cold core's caches shows there.

`profile_rows` adds torch.profiler's CPU-side events of `calls` fwd+bwd calls (kind=profile).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time

import torch

from lab.ops import host_bench as hb
from suite.ops.fused_adaln import op as A

DEFAULT_SHAPES = ((8, 1560, 1536), (1, 4096, 1536))


def host_loop_us(fn, calls: int, reps: int, settle=lambda: None) -> list[float]:
    """Per-call host microseconds of `reps` loops of `calls` fn() calls; settle() (e.g. a
    synchronise, so launches never fill the queue) runs after each loop, untimed."""
    for _ in range(3):
        fn()
    settle()
    out = []
    for _ in range(reps):
        t = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter_ns() - t) / calls / 1e3)
        settle()
    return out


@contextlib.contextmanager
def stamped_backward(cls, stamps: list, cpus: set[int] | None = None):
    """Within: cls.backward appends perf_counter_ns() at its entry and exit to `stamps`; with
    `cpus`, the thread running it (the engine's device thread on a GPU) is first pinned there."""
    inner = cls.__dict__["backward"]

    def backward(ctx, *grads):
        stamps.append(time.perf_counter_ns())
        if cpus is not None and os.sched_getaffinity(0) != cpus:
            os.sched_setaffinity(0, cpus)  # 0: the calling thread (Linux)
        out = inner.__func__(ctx, *grads)
        stamps.append(time.perf_counter_ns())
        return out

    cls.backward = staticmethod(backward)
    try:
        yield
    finally:
        cls.backward = inner


SEGMENTS = ("forward", "engine -> backward entry", "backward body", "backward exit -> return")


@contextlib.contextmanager
def one_cpu():
    """Within: this thread pinned to one of its CPUs; yields that CPU set (for stamped_backward,
    so the engine's thread shares the core and its caches). Restored on exit."""
    saved = os.sched_getaffinity(0)
    cpus = {min(saved)}
    os.sched_setaffinity(0, cpus)
    try:
        yield cpus
    finally:
        os.sched_setaffinity(0, saved)


def split_rows(impl, cls, x, e, dy, calls: int, settle, label: str, cpus=None) -> list[dict]:
    """fwd+bwd stamped at the engine's seams (module docstring); median us per segment. `cpus`:
    the backward's thread pinned there (see one_cpu)."""
    s, h = e[:, 1:2], e[:, 0:1]
    inner: list[int] = []
    seg: list[list[float]] = [[] for _ in SEGMENTS]
    with stamped_backward(cls, inner, cpus):
        for i in range(calls + 3):
            inner.clear()
            t0 = time.perf_counter_ns()
            y = impl(x, s, h)
            t1 = time.perf_counter_ns()
            torch.autograd.grad(y, (x, e), dy)
            t4 = time.perf_counter_ns()
            del y
            if i < 3 or len(inner) != 2:  # warm-up, or the backward did not run through cls
                continue
            t2, t3 = inner
            for k, v in enumerate((t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                seg[k].append(v / 1e3)
            if i % 50 == 0:
                settle()
    rows = [
        dict(kind="split", impl=label, part=name, us_min=min(v), us_median=statistics.median(v))
        for name, v in zip(SEGMENTS, seg)
        if v
    ]
    total = [sum(t) for t in zip(*seg)]
    if total:
        rows.append(dict(kind="split", impl=label, part="total (fwd+bwd)", us_min=min(total),
                         us_median=statistics.median(total)))  # fmt: skip
    return rows


def _pieces(B, N, D, dev, dy, x, e) -> dict:
    """Each layer of one call, as the op runs it (fused_cuda's plans already built)."""
    from suite.cuda import launch as L
    from suite.ops import adaln
    from suite.ops.fused_adaln import cuda as fused_cuda

    s, h = e[:, 1:2], e[:, 0:1]
    xs, es = x.detach(), e.detach()
    ss, hs = es[:, 1:2], es[:, 0:1]
    table = torch.empty(B, 6, D, device=dev)
    y = adaln(x, s, h)  # builds the forward and backward plans of this thread
    ctx = y.grad_fn  # the autograd node is the ctx its backward is given
    torch.autograd.grad(y, (x, e), dy)
    y = adaln(x, s, h)
    ctx = y.grad_fn
    # The backward piece reads real mean / rstd (null addresses fault on a GPU: 4831b5d's run
    # died of it); its default argument keeps them alive. The raw launches replay the plans'
    # packed arguments, which hold the last call's (freed, still cached) buffers: scratch only.
    y_keep, stats = fused_cuda.forward_stats(xs, ss, hs, 1e-6, fused_cuda.MODE_SAMPLE, x.dtype)
    mean = stats.data_ptr()
    rstd = mean + 4 * B * N
    fplan = next(v for k, v in fused_cuda._fwd_plans.items() if k[0] == x.shape)
    fwd = fplan[3] or fplan[4]
    bplan = next(v for k, v in fused_cuda._bwd_plans.items() if k[0] == x.shape)
    row, part_numel, fin = bplan.vec or bplan.scalar
    idx = x.device.index if x.is_cuda else 0
    stream = L.current_stream_handle(idx)

    def finalize():
        if bplan.pdl:
            L.launch_packed_dependent(fin.func, L.dependent_config(fin.grid, fin.block, 0,
                                                                   stream), fin.args)  # fmt: skip
        else:
            L.launch_packed(fin.func, fin.grid, fin.block, 0, stream, fin.args)

    return {
        "fwd: adaln(), no grad (whole call)": lambda: adaln(xs, ss, hs),
        "fwd:   signature key + spec lookup": lambda: A._specs.get(
            (
                x.shape,
                x.stride(),
                x.dtype,
                x.device,
                s.shape,
                s.stride(),
                s.dtype,
                s.device,
                h.shape,
                h.stride(),
                h.dtype,
                h.device,
                None,
                "fused",
                1e-6,
            )
        ),  # fmt: skip
        "fwd:   fused_cuda.forward_stats (whole)": lambda: fused_cuda.forward_stats(
            xs, ss, hs, 1e-6, fused_cuda.MODE_SAMPLE, torch.bfloat16
        ),
        "fwd:     torch.empty y [B, N, D] bf16": lambda: torch.empty(
            (B, N, D), dtype=torch.bfloat16, device=dev
        ),
        "fwd:     torch.empty stats [2, B, N] fp32": lambda: torch.empty((2, B, N), device=dev),
        "fwd:     launch_packed (forward kernel)": lambda: L.launch_packed(
            fwd.func, fwd.grid, fwd.block, 0, stream, fwd.args
        ),
        "fwd: Wan table rows lookup (_table_rows)": lambda: A._table_rows(s, h, B, D),
        "fwd: adaln(), grad (whole forward)": lambda: adaln(x, s, h),
        "fwd:   autograd floor forward (_Floor.apply)": lambda: hb.autograd_floor(x, s, h),
        "bwd: _EagerAdaLNRows.backward body, this thread": lambda: ctx._forward_cls.backward(
            ctx, dy
        ),
        "bwd:   torch.empty dtable [B, 6, D] fp32": lambda: torch.empty(
            table.shape, dtype=torch.float32, device=dev
        ),
        "bwd:   dy.contiguous() (already contiguous)": lambda: dy.contiguous(),
        "bwd:   fused_cuda.backward, table rows (whole)": lambda _alive=(y_keep, stats): (
            fused_cuda.backward(
                dy, xs, ss, mean, rstd, fused_cuda.MODE_SAMPLE, "fused", (table, 1, 0)
            )
        ),
        "fwd:   backward_plan (key + lookup, at forward time)": lambda: fused_cuda.backward_plan(
            xs, torch.bfloat16, ss, fused_cuda.MODE_SAMPLE, "fused", (table.shape, 1, 0)
        ),
        "bwd:     torch.empty dx [B, N, D] bf16": lambda: torch.empty(
            (B, N, D), dtype=torch.bfloat16, device=dev
        ),
        "bwd:     torch.empty partial sums fp32": lambda: torch.empty(
            2 * part_numel, dtype=torch.float32, device=dev
        ),
        "bwd:     current-stream handle": lambda: L.current_stream_handle(idx),
        "bwd:     launch_packed (row kernel)": lambda: L.launch_packed(
            row.func, row.grid, row.block, row.smem, stream, row.args
        ),
        "bwd:     finalize launch (PDL config + cuLaunchKernelEx)": finalize,
        "fwd+bwd: autograd floor (autograd.grad of _Floor)": lambda: torch.autograd.grad(
            hb.autograd_floor(x, s, h), (x, e), dy
        ),
        "fwd+bwd: op (autograd.grad of adaln)": lambda: torch.autograd.grad(
            adaln(x, s, h), (x, e), dy
        ),
    }


def _rows_at(B, N, D, dev, calls: int, reps: int, settle) -> list[dict]:
    from suite.ops import adaln

    x, e, dy = hb._inputs(B, N, D, dev, True)
    shape = f"{B}x{N}x{D}"
    rows = []
    for name, fn in _pieces(B, N, D, dev, dy, x, e).items():
        try:
            us = host_loop_us(fn, calls, reps, settle)
        except RuntimeError as err:  # one piece that cannot be timed alone must not lose the rest
            rows.append(dict(kind="piece", impl="op", part=name, note=f"not run: {err}"[:200]))
            continue
        rows.append(dict(kind="piece", impl="op", part=name, us_min=min(us),
                         us_median=statistics.median(us)))  # fmt: skip
    n = calls * reps // 4
    rows += split_rows(adaln, A._EagerAdaLNRows, x, e, dy, n, settle, "op")
    rows += split_rows(hb.autograd_floor, hb._Floor, x, e, dy, n, settle, "floor")
    # The backward on the calling thread (no hand-off to autograd's device thread) ...
    with torch.autograd.set_multithreading_enabled(False):
        rows += split_rows(adaln, A._EagerAdaLNRows, x, e, dy, n, settle, "op, 1 autograd thread")
        rows += split_rows(hb.autograd_floor, hb._Floor, x, e, dy, n, settle,
                           "floor, 1 autograd thread")  # fmt: skip
    # ... and on the device thread with both threads on one core: if the backward's Python runs
    # slower there because that core's caches are cold, this is where it shows.
    saved = os.sched_getaffinity(0)
    with one_cpu() as cpus:
        rows += split_rows(adaln, A._EagerAdaLNRows, x, e, dy, n, settle, "op, 1 core", cpus)
        rows += split_rows(hb.autograd_floor, hb._Floor, x, e, dy, n, settle, "floor, 1 core",
                           cpus)  # fmt: skip
    for cls, impl in ((A._EagerAdaLNRows, adaln), (hb._Floor, hb.autograd_floor)):
        split_rows(impl, cls, x, e, dy, 1, settle, "", saved)  # the engine's thread unpinned
    for r in rows:
        r.update(shape=shape, device="cuda" if dev == "cuda" else "cpu (driver stubbed)")
    return rows


def gpu_rows(calls: int = 100, reps: int = 20, shapes=DEFAULT_SHAPES) -> list[dict]:
    """The breakdown with the real driver and the CUDA caching allocator."""
    rows = []
    for B, N, D in shapes:
        rows += _rows_at(B, N, D, "cuda", calls, reps, torch.cuda.synchronize)
    return rows


def cpu_rows(calls: int = 200, reps: int = 20, shapes=DEFAULT_SHAPES) -> list[dict]:
    """The breakdown on CPU tensors (N = 8 rows) with every driver call stubbed."""
    rows = []
    with hb.stub_launches():
        for B, _, D in shapes:
            rows += _rows_at(B, 8, D, "cpu", calls, reps, lambda: None)
    return rows


def profile_rows(calls: int = 50, shape=DEFAULT_SHAPES[0], top: int = 25) -> list[dict]:
    """torch.profiler's CPU-side events of `calls` fwd+bwd calls of the op on the GPU: per event
    name, calls and CPU time per fwd+bwd call (us), the `top` largest by total time."""
    from torch.profiler import ProfilerActivity, profile

    from suite.ops import adaln

    B, N, D = shape
    x, e, dy = hb._inputs(B, N, D, "cuda", True)
    s, h = e[:, 1:2], e[:, 0:1]
    for _ in range(5):
        torch.autograd.grad(adaln(x, s, h), (x, e), dy)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            torch.autograd.grad(adaln(x, s, h), (x, e), dy)
        torch.cuda.synchronize()
    events = sorted(prof.key_averages(), key=lambda ev: -ev.cpu_time_total)[:top]
    return [
        dict(
            kind="profile",
            impl="op",
            part=ev.key,
            shape=f"{B}x{N}x{D}",
            device="cuda",
            count_per_call=ev.count / calls,
            cpu_total_us=ev.cpu_time_total / calls,
            self_cpu_us=ev.self_cpu_time_total / calls,
        )  # fmt: skip
        for ev in events
    ]
