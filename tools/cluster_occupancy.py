"""Round 25's diagnostic (docs/perf-notes.md): how many CTAs of the fused backward's row kernel
can be resident at once when it is launched in thread block clusters, against the plain launch's
one wave (the occupancy API: cuOccupancyMaxActiveClusters against blocks per SM x SMs).
Usage (GPU): python tools/cluster_occupancy.py
"""

from __future__ import annotations

import torch
from cuda.bindings import driver

from suite.cuda.launch import _check, _launch_config, current_stream_handle
from suite.ops import fused_cuda


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("cluster_occupancy.py: needs a CUDA GPU (none found)")
    bf, f32 = torch.bfloat16, torch.float32
    print("D     variant  threads  plain-wave-CTAs  cluster  max-clusters  cluster-CTAs")
    for D in (1536, 3072, 5120):
        for v in ("bwd-cl4", "bwd-cl8"):
            cfg, func, cap, smem, _ = fused_cuda._bwd_plan(bf, f32, bf, D, 0, True, True, v, 0)
            cl = cfg.bwd_cluster
            grid = (cap - cap % cl, 1, 1)
            c = _launch_config(grid, cfg.bwd_threads, smem, current_stream_handle(0), False, cl)
            n = _check(driver.cuOccupancyMaxActiveClusters(func, c), "MaxActiveClusters")
            print(f"{D:<5} {v:<8} {cfg.bwd_threads:>7}  {cap:>15}  {cl:>7}  {n:>12}  {n * cl:>12}")


if __name__ == "__main__":
    main()
