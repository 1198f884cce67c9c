"""Burst benchmark of the fused AdaLN op's host path: 50 back-to-back calls, per call.

    python -m lab.ops.host_bench [--out DIR] [--calls 50] [--reps 30] [--cpu]
    python -m lab.ops.host_bench --breakdown [--profile] [--cpu] [--out DIR]   (host_breakdown)

GPU (CUDA present), bf16 x [B, N, 1536] with Wan's fp32 [B, 6, D] modulation (scale, shift =
e[:, 1:2], e[:, 0:1]), at B x N = 8 x 1560 and 1 x 4096, forward (no grad) and forward+backward
(autograd.grad of x and e), per impl:
  burst_us   50 calls then synchronise, wall time per call (what a training step sees)
  host_us    the same 50 calls enqueued behind a long GPU spin: host time per call alone
  graph_us   the 50 calls captured in one CUDA graph and replayed: the GPU time per call
for the op, eager (F.layer_norm + modulate), torch.compile of that eager function and the
autograd floor (_Floor); fwd+bwd of the op and the floor also with the backward on the calling
thread (torch.autograd.set_multithreading_enabled(False): impl "... (1 autograd thread)").

CPU (no CUDA; `--cpu` forces it): the op's CUDA host path on CPU tensors with every driver
call stubbed (lab.ops.host_bench.stub_launches): the public function, validation cache,
launch-plan lookup, allocations (CPU allocator, N = 8 rows so no large buffers), argument
packing and autograd, but not the driver's cuLaunchKernel itself, the CUDA caching allocator or
the current-stream query. A launch given (values, types) pairs is packed into ctypes objects as
cuda-bindings would do it, so the old path pays its packing too. Writes host_path_cpu.csv.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import statistics
import time
import zlib
from pathlib import Path

import torch

SHAPES = ((8, 1560, 1536), (1, 4096, 1536))


class _FakeDriver:
    """cuda.bindings.driver with the launches replaced: a (values, types) kernelParams is packed
    into ctypes objects and an array of their addresses, as cuda-bindings does before calling
    the driver; then nothing is launched."""

    def __init__(self, real):
        self._real = real
        self.launches = 0
        self.log: list[tuple] = []  # (function handle, grid, block, kernelParams) per launch

    def __getattr__(self, name):
        return getattr(self._real, name)

    def _pack(self, params, f=None, grid=None, block=None):
        if len(self.log) < 64:
            self.log.append((int(f) if f is not None else None, grid, block, params))
        if isinstance(params, tuple):
            objs = [t(v) for v, t in zip(*params)]
            (ctypes.c_void_p * len(objs))(*(ctypes.addressof(o) for o in objs))
        self.launches += 1
        return (self._real.CUresult.CUDA_SUCCESS,)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        return self._pack(params, f, (gx, gy, gz), bx)

    def cuLaunchKernelEx(self, config, f, params, extra):
        grid = (config.gridDimX, config.gridDimY, config.gridDimZ)
        return self._pack(params, f, grid, config.blockDimX)

    def cuFuncSetAttribute(self, *a):
        return (self._real.CUresult.CUDA_SUCCESS,)


def function_id(name: str) -> int:
    """The stub's CUfunction handle for kernel name expression `name` (distinct per name)."""
    return zlib.crc32(name.encode()) | 1


def kernel_args(params: int, n: int) -> list[int]:
    """The n 8-byte argument slots a packed kernelParams address points at (stub launches)."""
    ptrs = (ctypes.c_void_p * n).from_address(params)
    return [ctypes.c_uint64.from_address(p).value for p in ptrs]


@contextlib.contextmanager
def stub_launches():
    """Run the op's CUDA host path on CPU tensors: kernels are still compiled (NVRTC, cached on
    disk) and looked up by name, but module loads, device queries, the stream and launches are
    stubbed. Restores everything (and drops the stubbed launch plans) on exit."""
    from suite.cuda import launch as L
    from suite.ops.fused_adaln import cuda as F
    from suite.ops.fused_adaln import op as A

    fake = _FakeDriver(L.driver)
    saved = []

    def patch(mod, name, value):
        saved.append((mod, name, getattr(mod, name)))
        setattr(mod, name, value)

    patch(L, "driver", fake)
    patch(L, "device_arch", lambda index=None: "sm_90")
    patch(L, "get_function", lambda program, name, index: L.driver.CUfunction(function_id(name)))
    patch(L, "max_blocks_per_sm", lambda func, threads, smem=0: 2)
    patch(L, "sm_count", lambda index: 132)
    patch(L, "current_stream_handle", lambda index: 0)
    patch(F, "_sm90", lambda index: True)
    patch(A, "_use_cuda", lambda x: True)
    _clear_caches(F, A)
    try:
        yield fake
    finally:
        for mod, name, value in reversed(saved):
            setattr(mod, name, value)
        _clear_caches(F, A)


def _clear_caches(F, A) -> None:
    for name in ("_fn", "_fwd_plan", "_bwd_plan", "_config"):
        getattr(getattr(F, name, None), "cache_clear", lambda: None)()
    getattr(F, "clear_plans", lambda: None)()
    from suite.ops.fused_adaln import args

    A._specs.clear()
    args._rows_cache.clear()


def per_call_us(fn, calls: int, reps: int, sync=lambda: None, before=lambda: None) -> list[float]:
    """`reps` bursts of `calls` calls; per-call microseconds of each burst (sync at its end)."""
    for _ in range(3):
        fn()
    sync()
    out = []
    for _ in range(reps):
        before()
        t = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        sync()
        out.append((time.perf_counter_ns() - t) / calls / 1e3)
    return out


class _Floor(torch.autograd.Function):
    """The host floor of any autograd op of this signature: y allocated, nothing computed, and
    a backward that allocates dx and the [B, 6, D] gradient. Its fwd+bwd burst is mostly
    torch.autograd.grad's own cost (engine start, graph walk), paid once per backward call."""

    @staticmethod
    def forward(ctx, x, table):
        ctx.shapes = x.shape, table.shape
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx, dy):
        xs, ts = ctx.shapes
        return torch.empty(xs, dtype=dy.dtype, device=dy.device), dy.new_empty(
            ts, dtype=torch.float32
        )


def autograd_floor(x, scale, shift):
    """_Floor on the table scale and shift are views of (Wan's e)."""
    return _Floor.apply(x, scale._base if scale._base is not None else scale)


def _inputs(B, N, D, device, grad: bool):
    # Drawn on the CPU and moved: the CUDA generator is left alone, so a graph capture that
    # failed earlier (a result the benchmark reports) cannot break the next shape's inputs.
    def rand(*shape, dtype=torch.float32):
        return torch.randn(*shape).to(device=device, dtype=dtype)

    x = rand(B, N, D, dtype=torch.bfloat16).requires_grad_(grad)
    e = rand(B, 6, D).requires_grad_(grad)
    dy = rand(B, N, D, dtype=torch.bfloat16)
    return x, e, dy


def _calls(impl, x, e, dy, grad: bool):
    # The rows are sliced inside each call, as a model does: a view made once outside would keep
    # its backward node on the stream it was made on, and a CUDA-graph capture of the call on
    # another stream then fails ("would make the legacy stream depend on a capturing stream").
    if not grad:

        def fwd():
            with torch.no_grad():
                impl(x, e[:, 1:2], e[:, 0:1])

        return fwd

    def fwd_bwd():
        torch.autograd.grad(impl(x, e[:, 1:2], e[:, 0:1]), (x, e), dy)

    return fwd_bwd


def cpu_rows(calls: int, reps: int) -> list[dict]:
    from suite.ops import adaln

    rows = []
    with stub_launches() as fake:
        for B, N, D in SHAPES:
            for grad in (False, True):
                x, e, dy = _inputs(B, 8, D, "cpu", grad)
                for name, impl in (("op", adaln), ("autograd-floor", autograd_floor)):
                    fn = _calls(impl, x, e, dy, grad)
                    n0 = fake.launches
                    fn()
                    launches = fake.launches - n0
                    us = per_call_us(fn, calls, reps)
                    rows.append(
                        dict(
                            shape=f"{B}x{N}x{D}",
                            rows_measured=B * 8,
                            op="fwd+bwd" if grad else "fwd",
                            impl=name,
                            launches_per_call=launches,
                            host_us_median=statistics.median(us),
                            host_us_min=min(us),
                            reps=reps,
                            calls=calls,
                        )
                    )
    return rows


# fwd+bwd again with torch.autograd.set_multithreading_enabled(False): the backward runs on the
# calling thread, not on autograd's CUDA device thread (no two thread hand-offs per call)
ONE_THREAD = " (1 autograd thread)"


def gpu_rows(calls: int, reps: int) -> list[dict]:
    from suite.ops import adaln
    from suite.ops.baselines import eager_adaln

    compiled = torch.compile(eager_adaln)
    impls = {
        "op": adaln,
        "eager": eager_adaln,
        "compile-eager": compiled,
        "autograd-floor": autograd_floor,
    }
    sync = torch.cuda.synchronize
    rows = []
    for B, N, D in SHAPES:
        for grad in (False, True):
            x, e, dy = _inputs(B, N, D, "cuda", grad)
            runs = [(name, impl, True) for name, impl in impls.items()]
            if grad:
                runs += [
                    (name + ONE_THREAD, impls[name], False) for name in ("op", "autograd-floor")
                ]
            for name, impl, threads in runs:
                fn = _calls(impl, x, e, dy, grad)
                row = dict(shape=f"{B}x{N}x{D}", op="fwd+bwd" if grad else "fwd", impl=name)
                with torch.autograd.set_multithreading_enabled(threads):
                    burst = per_call_us(fn, calls, reps, sync)
                    spin = lambda: torch.cuda._sleep(200_000_000)  # noqa: E731  (~0.1 s ahead)
                    host = per_call_us(fn, calls, max(3, reps // 5), before=spin)
                    sync()
                    row.update(burst_us=statistics.median(burst), host_us=statistics.median(host))
                    row["graph_us"] = _graph_us(fn, calls, reps) if threads else "not run: as above"
                rows.append(row)
    return rows


def _graph_us(fn, calls: int, reps: int) -> float | str:
    """GPU time per call of `calls` calls replayed from one CUDA graph (events, median)."""
    first: list[str] = []
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(calls):
                try:
                    fn()
                except Exception as err:  # capture_end's error would hide this one
                    first.append(f"{type(err).__name__}: {str(err).splitlines()[0][:80]}")
                    raise
        g.replay()
        torch.cuda.synchronize()
        return replay_us(g, reps) / calls
    except Exception as err:  # a capture failure is a result to report, not a crash
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()
        inside = f" (first, inside the capture: {first[0]})" if first else ""
        return f"not run: {type(err).__name__}: {str(err).splitlines()[0][:80]}{inside}"


def replay_us(g, reps: int) -> float:
    """Median microseconds of one replay of CUDA graph `g` over `reps` replays (CUDA events)."""
    from suite.timing import cuda_event_median_ms

    _, ms = cuda_event_median_ms(g.replay, warmup=0, repeat=reps)
    return statistics.median(ms) * 1e3


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__)
    ap.formatter_class = argparse.RawDescriptionHelpFormatter
    ap.add_argument("--out", type=Path, help="folder for host_path_{gpu,cpu}.csv")
    ap.add_argument("--calls", type=int, default=50, help="calls per burst (default 50)")
    ap.add_argument("--reps", type=int, default=30, help="bursts per measurement (default 30)")
    ap.add_argument("--cpu", action="store_true", help="the stubbed CPU measurement even with CUDA")
    ap.add_argument(
        "--breakdown",
        action="store_true",
        help="host cost of each piece of fwd and bwd, and fwd+bwd split at the autograd "
        "engine's seams (lab.ops.host_breakdown; real driver on a GPU, stubbed with --cpu)",
    )
    ap.add_argument(
        "--profile", action="store_true", help="with --breakdown on a GPU: torch.profiler rows too"
    )
    a = ap.parse_args(argv)
    if a.calls < 1 or a.reps < 3:
        ap.error(f"--calls must be >= 1 and --reps >= 3, got {a.calls} and {a.reps}")
    import pandas as pd

    gpu = torch.cuda.is_available() and not a.cpu
    if a.breakdown:
        from lab.ops import host_breakdown as hbd

        rows = hbd.gpu_rows(a.calls, a.reps) if gpu else hbd.cpu_rows(a.calls, a.reps)
        if gpu and a.profile:
            rows += hbd.profile_rows()
        name = f"host_path_breakdown_{'gpu' if gpu else 'cpu'}.csv"
    else:
        rows = gpu_rows(a.calls, a.reps) if gpu else cpu_rows(a.calls, a.reps)
        name = f"host_path_{'gpu' if gpu else 'cpu'}.csv"
    df = pd.DataFrame(rows)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        df.to_csv(a.out / name, index=False)
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        print(df.round(2).to_string(index=False))


if __name__ == "__main__":
    main()
