"""GPU benchmarks of the fused AdaLN op at the Wan widths (skipped without a GPU).

track_*_gbps: GB/s from the explicit bytes model of suite.experiments.kernels (L2 flushed before
each timed call, CUDA events); track_*_pct_copy_bw: that over the device-to-device copy bandwidth
measured in the same process; time_*: synchronised wall time; track_peak_mem_mib: GPU memory.
"""

from __future__ import annotations

import statistics

from benchmarks.common import require_gpu

N = 65_536


class FusedAdaLN:
    version = 1
    params = ([1536, 3072, 5120], ["bfloat16", "float32"])
    param_names = ["D", "dtype"]
    timeout = 300

    def setup(self, D, dtype):
        require_gpu()
        import torch

        from suite.experiments.kernels import bytes_model
        from suite.ops import adaln
        from suite.ops.bench import Timer, copy_bandwidth

        dt = getattr(torch, dtype)
        self.x = torch.randn(1, N, D, device="cuda", dtype=dt, requires_grad=True)
        mod = torch.randn(1, 6, D, device="cuda", dtype=torch.float32)
        self.scale, self.shift = mod[:, 1], mod[:, 0]  # Wan's strided chunks, no copy
        self.dy = torch.randn(1, N, D, device="cuda", dtype=dt)
        self.adaln = adaln
        self.timer = Timer(reps=30)
        self.copy_gbps, _ = copy_bandwidth(self.timer)
        size = self.x.element_size()
        self.fwd_bytes = bytes_model("fwd", 1, N, D, size, size)
        self.bwd_bytes = bytes_model("bwd", 1, N, D, size, size)

    def _fwd(self, _=None):
        import torch

        with torch.no_grad():
            return self.adaln(self.x, self.scale, self.shift)

    def _bwd_setup(self):
        y = self.adaln(self.x, self.scale, self.shift)
        return y

    def _bwd(self, y):
        y.backward(self.dy)

    def _gbps(self, op):
        if op == "fwd":
            ms = statistics.median(self.timer.time(self._fwd))
            return self.fwd_bytes / (ms * 1e-3) / 1e9
        ms = statistics.median(self.timer.time(self._bwd, setup=self._bwd_setup))
        return self.bwd_bytes / (ms * 1e-3) / 1e9

    def track_fwd_gbps(self, D, dtype):
        return self._gbps("fwd")

    def track_bwd_gbps(self, D, dtype):
        return self._gbps("bwd")

    def track_fwd_pct_copy_bw(self, D, dtype):
        return 100 * self._gbps("fwd") / self.copy_gbps

    def track_bwd_pct_copy_bw(self, D, dtype):
        return 100 * self._gbps("bwd") / self.copy_gbps

    def time_fwd(self, D, dtype):
        import torch

        self._fwd()
        torch.cuda.synchronize()

    def track_peak_mem_mib(self, D, dtype):
        import torch

        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        y = self.adaln(self.x, self.scale, self.shift)
        y.backward(self.dy)
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20

    track_fwd_gbps.unit = track_bwd_gbps.unit = "GB/s"
    track_fwd_pct_copy_bw.unit = track_bwd_pct_copy_bw.unit = "%"
    track_peak_mem_mib.unit = "MiB"
