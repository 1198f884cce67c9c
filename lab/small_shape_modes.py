"""Why the shape sweep's small shapes are bimodal on the H200 node (~0.22 s or ~0.4 s a step).

The 30-block Wan 2.1 1.3B step (suite.train.stepfn, checkpointing, bf16) at B*S <= ~10k tokens is
host-bound; the sweeps put the same shape at 0.22 s in one repeat and 0.46 s in the next
(lab/LOG.md, "The full reference at dd54683"). Each step here records wall time, the GPU
time between events at its start and end, the process's CPU time, the caching allocator's
cudaMalloc count and the SM clock, under conditions that would each explain a slow mode:
  base         after warm-up, the sweep's way
  after-big    right after one 75,600-token step (the sweep runs shapes in descending B*S)
  gc-off       Python's garbage collector disabled
  empty-cache  torch.cuda.empty_cache() before each step (every step re-allocates)
Writes $OUT/small_shape_modes.csv and prints a summary per (condition, B).

    PYTHONPATH=/tmp/site:. python3 lab/small_shape_modes.py --repeats 12
"""

from __future__ import annotations

import argparse
import gc
import os
import time

import pandas as pd
import torch

from suite.timing import CudaSpan
from suite.train.stepfn import make_step_fn


def sm_clock() -> float:
    try:
        return float(torch.cuda.clock_rate())
    except Exception:  # pynvml absent: no clock column
        return float("nan")


def one(step, B, S, condition):
    if condition == "empty-cache":
        torch.cuda.empty_cache()
    torch.cuda.synchronize()
    allocs = torch.cuda.memory_stats().get("num_device_alloc", 0)
    cpu0, t0 = time.process_time(), time.perf_counter()
    with CudaSpan() as span:
        wall, _, _ = step(B, S)
    torch.cuda.synchronize()
    return {
        "condition": condition,
        "B": B,
        "S": S,
        "wall_s": wall,
        "outer_s": time.perf_counter() - t0,
        "gpu_s": span.ms() / 1e3,
        "cpu_s": time.process_time() - cpu0,
        "mallocs": torch.cuda.memory_stats().get("num_device_alloc", 0) - allocs,
        "sm_mhz": sm_clock(),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--repeats", type=int, default=12)
    a = p.parse_args()
    torch.cuda.init()
    step = make_step_fn("wan-1.3b", None, device="cuda", dtype="bf16", checkpointing=True)
    shapes = [(1, 1560), (4, 1560)]
    for B, S in shapes:  # warm-up, as the sweep does
        step(B, S)
    rows = []
    for condition in ("base", "after-big", "gc-off", "empty-cache"):
        if condition == "after-big":
            step(1, 75600)
        if condition == "gc-off":
            gc.disable()
        for _ in range(a.repeats):
            for B, S in shapes:
                rows.append(one(step, B, S, condition))
        gc.enable()
        print(f"{condition}: done", flush=True)
    t = pd.DataFrame(rows)
    out = os.environ.get("OUT", "/tmp")
    t.to_csv(f"{out}/small_shape_modes.csv", index=False)
    pd.set_option("display.width", 200)
    print(t.to_string(float_format=lambda x: f"{x:.3f}"))
    g = t.groupby(["condition", "B"])
    print(g[["wall_s", "gpu_s", "cpu_s", "mallocs", "sm_mhz"]].median().round(3))
    print(g.wall_s.agg(["min", "max"]).round(3))


if __name__ == "__main__":
    main()
