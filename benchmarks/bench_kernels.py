"""GPU benchmarks of the fused AdaLN op at the Wan widths (skipped without a GPU).

All GB/s are measured once, in `setup_cache` (one process: copy bandwidth, then every width and
dtype, forward and backward, L2-cold CUDA-event medians from suite.experiments.kernels.bench), and the track_
benchmarks read them: asv would otherwise redo the set-up (2 GB copy, inputs, warm-up) for every
benchmark x parameter, which took over 200 s on the H200. track_*_gbps: GB/s from the explicit
bytes model of suite.experiments.kernels; track_*_pct_copy_bw: that over the copy bandwidth of the
same process (track_bwd_train_*: the backward with Wan's modulation needing a gradient too, as in
training; track_bwd_*: x's gradient only); track_peak_mem_mib: GPU memory of one forward + backward; time_fwd: synchronised.
"""

from __future__ import annotations

import statistics

from benchmarks.common import gpu_available, require_gpu

N = 65_536
WIDTHS = [1536, 3072, 5120]
DTYPES = ["bfloat16", "float32"]


def _inputs(D: int, dtype: str):
    import torch

    dt = getattr(torch, dtype)
    x = torch.randn(1, N, D, device="cuda", dtype=dt, requires_grad=True)
    mod = torch.randn(1, 6, D, device="cuda")  # Wan's [B, 6, D]; scale/shift are strided views
    return x, mod, torch.randn(1, N, D, device="cuda", dtype=dt)


def _measure_one(timer, D: int, dtype: str) -> dict:
    import torch

    from suite.experiments.kernels.traffic import bytes_model
    from suite.ops import adaln

    x, mod, dy = _inputs(D, dtype)
    scale, shift = mod[:, 1:2], mod[:, 0:1]
    size = x.element_size()
    with torch.no_grad():
        fwd_ms = statistics.median(timer.time(lambda _: adaln(x, scale, shift)))
    # autograd.grad, not y.backward: backward() would add dx into x.grad, an extra read and write
    # of x that the byte model does not count (version 2 measured it: ~45% instead of ~67%)
    bwd_ms = statistics.median(
        timer.time(lambda y: torch.autograd.grad(y, x, dy), setup=lambda: adaln(x, scale, shift))
    )
    # as in Wan training: the [B, 6, D] modulation needs a gradient too (its rows' gradients are
    # written into it directly by the backward)
    e = mod.detach().requires_grad_(True)
    train_ms = statistics.median(
        timer.time(
            lambda y: torch.autograd.grad(y, (x, e), dy),
            setup=lambda: adaln(x, e[:, 1:2], e[:, 0:1]),
        )
    )
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    adaln(x, scale, shift).backward(dy)
    torch.cuda.synchronize()
    return {
        "fwd_gbps": bytes_model("fwd", 1, N, D, size, size) / (fwd_ms * 1e-3) / 1e9,
        "bwd_gbps": bytes_model("bwd", 1, N, D, size, size) / (bwd_ms * 1e-3) / 1e9,
        "bwd_train_gbps": bytes_model("bwd", 1, N, D, size, size) / (train_ms * 1e-3) / 1e9,
        "peak_mib": (torch.cuda.max_memory_allocated() - base) / 2**20,
    }


def measure_all() -> dict:
    """{(D, dtype): {fwd_gbps, bwd_gbps, peak_mib}} and the copy bandwidth, in one process."""
    from suite.experiments.kernels.bench import Timer, copy_bandwidth

    timer = Timer(reps=20)
    out: dict = {"copy_gbps": copy_bandwidth(timer)[0]}
    for D in WIDTHS:
        for dtype in DTYPES:
            out[(D, dtype)] = _measure_one(timer, D, dtype)
    return out


class FusedAdaLN:
    version = 3
    params = (WIDTHS, DTYPES)
    param_names = ["D", "dtype"]
    timeout = 600

    def setup_cache(self):
        # never None: asv passes the cache to setup and the benchmarks only when it is not None
        return measure_all() if gpu_available() else {"gpu": False}

    def setup(self, cache, D, dtype):  # asv passes setup_cache's result first, to setup too
        require_gpu()

    def track_fwd_gbps(self, cache, D, dtype):
        return cache[(D, dtype)]["fwd_gbps"]

    def track_bwd_gbps(self, cache, D, dtype):
        return cache[(D, dtype)]["bwd_gbps"]

    def track_fwd_pct_copy_bw(self, cache, D, dtype):
        return 100 * cache[(D, dtype)]["fwd_gbps"] / cache["copy_gbps"]

    def track_bwd_pct_copy_bw(self, cache, D, dtype):
        return 100 * cache[(D, dtype)]["bwd_gbps"] / cache["copy_gbps"]

    def track_bwd_train_pct_copy_bw(self, cache, D, dtype):
        """The backward with gradients for x and Wan's modulation, as in training."""
        return 100 * cache[(D, dtype)]["bwd_train_gbps"] / cache["copy_gbps"]

    def track_peak_mem_mib(self, cache, D, dtype):
        return cache[(D, dtype)]["peak_mib"]

    track_fwd_gbps.unit = track_bwd_gbps.unit = "GB/s"
    track_fwd_pct_copy_bw.unit = track_bwd_pct_copy_bw.unit = track_bwd_train_pct_copy_bw.unit = "%"
    track_peak_mem_mib.unit = "MiB"


class FusedAdaLNTime:
    """Synchronised wall time of one forward at D = 1536, bf16 (asv's own timing loop)."""

    version = 1
    timeout = 120

    def setup(self):
        require_gpu()
        from suite.ops import adaln

        self.adaln = adaln
        self.x, mod, _ = _inputs(1536, "bfloat16")
        self.scale, self.shift = mod[:, 1:2], mod[:, 0:1]

    def time_fwd(self):
        import torch

        with torch.no_grad():
            self.adaln(self.x, self.scale, self.shift)
        torch.cuda.synchronize()
