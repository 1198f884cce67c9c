"""Oracle: VideoSys's baseline bucket profile and its median rescale, and DCP's per-bucket
gradient accumulation count.

Source: NUS-HPC-AI-Lab/VideoSys, videosys/core/dcp/profiler.py (the baseline branch of
`Profiler.profile`'s result handling: batch doubled from 1 until it fails, the last success kept;
`interpolate_profile_results` without dynamic sequence parallelism) and
the dynamic-SP branch's choice of a bucket's batch under --auto-grad-accumulation (`best`: the
profiled row of most bs / sp_size / time) and videosys/training/datasets/open_sora/sampler.py
(`_calculate_grad_accumulation_num`), commit
4cce477 (HEAD of the mirror read). Apache License 2.0 (the repository's LICENSE;
http://www.apache.org/licenses/LICENSE-2.0); this port is a derived work under that licence,
changed from the original: profiling runs are a `step_time(B)` argument that raises MemoryError
where the batch does not fit, results are plain dicts, and the profiler's override for a
cache-flush slowdown (the previous batch kept when its throughput is over 2x) is left out (a
cost model has no such slowdown).
"""

import math

import numpy as np


def profile_bucket(step_time):
    """{"bs", "execution_time"} of the largest power-of-two batch that runs, None if B = 1
    fails."""
    bs, last = 1, None
    while True:
        try:
            t = step_time(bs)
        except MemoryError:
            return last
        last = {"bs": bs, "execution_time": t}
        bs *= 2


def interpolate_profile_results(profile_results):
    """In place, as VideoSys does without dynamic SP: buckets slower than the median of the
    profiled times get bs = max(1, int(bs * median / time))."""
    time_list = [info["execution_time"] for info in profile_results.values()]
    median_time = np.median(time_list)
    for info in profile_results.values():
        cur_time, cur_bs = info["execution_time"], info["bs"]
        if cur_time > median_time:
            new_bs = max(1, int(cur_bs * median_time / cur_time))
            info["execution_time"] = cur_time * new_bs / cur_bs
            info["bs"] = new_bs
    return profile_results


def best_row(dp_results):
    """The profiled (ar, frames, bs, sp_size, time) row DCP keeps for a bucket."""
    return sorted(dp_results, key=lambda x: x[2] / x[3] / x[4], reverse=True)[0]


def calculate_grad_accumulation_num(exec_time_list, max_steps=5, min_steps=2):
    """Per rank, its gradient accumulation count: the counts that bring every rank's
    exec_time * count closest to one rank's exec_time * mult (over time costs 1.2, under 1)."""

    def score_func(new_time, median_time):
        if new_time > median_time:
            return (new_time - median_time) * 1.2
        return (median_time - new_time) * 1

    max_time = max(exec_time_list) * max_steps
    min_diff = float("inf")
    num_gas = None
    for exec_time_outer in exec_time_list:
        max_mult_outer = int(max_time / exec_time_outer)
        for mult in range(1, max_mult_outer + 1):
            time_outer = exec_time_outer * mult
            if time_outer > max_time:
                break
            gas_outer, diff_outer = [], 0
            for exec_time_inner in exec_time_list:
                gas_inner, diff_inner = None, float("inf")
                max_mult_inner = int(max_time / exec_time_inner)
                for gas_val in range(1, max_mult_inner + 1):
                    time_inner = exec_time_inner * gas_val
                    if time_inner > max_time:
                        break
                    now_diff = score_func(time_inner, time_outer)
                    if now_diff < diff_inner:
                        diff_inner = now_diff
                        gas_inner = gas_val
                diff_outer += diff_inner
                gas_outer.append(gas_inner)
            if diff_outer < min_diff:
                min_diff = diff_outer
                num_gas = gas_outer
    if max(num_gas) < min_steps:
        steps = math.ceil(min_steps / max(num_gas))
        num_gas = [i * steps for i in num_gas]
    return num_gas
