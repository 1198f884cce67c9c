"""Oracle: VideoSys's baseline bucket profile with its median rescale, DCP's choice of a
bucket's batch, and DCP's per-rank gradient accumulation counts.

Specifies the behaviour of NUS-HPC-AI-Lab/VideoSys (Apache-2.0), commit 4cce477 (the mirror's
HEAD when read): videosys/core/dcp/profiler.py (the baseline branch of `Profiler.profile`'s
result handling; `interpolate_profile_results` without dynamic sequence parallelism; under
--auto-grad-accumulation the dynamic-SP branch's `best` row) and
videosys/training/datasets/open_sora/sampler.py (`_calculate_grad_accumulation_num`). This is
an independent implementation of the behaviour described; no source code copied. Profiling runs
are a `step_time(B)` argument that raises MemoryError where B does not fit; the profiler's
guard against a cache-flush slowdown (keeping the previous batch when throughput jumps over 2x)
is outside it, since a cost model has no such slowdown.
"""

import math

import numpy as np


def profile_bucket(step_time):
    """{"bs", "execution_time"} of the last power-of-two batch (1, 2, 4, ...) that runs before
    the first MemoryError; None if B = 1 already fails."""
    last, B = None, 1
    while True:
        try:
            last = {"bs": B, "execution_time": step_time(B)}
        except MemoryError:
            return last
        B *= 2


def interpolate_profile_results(profile_results):
    """Buckets slower than the median profiled time (np.median) shrink to
    B' = max(1, int(B * median / time)), their time scaled by B' / B; the others are unchanged.
    Rewrites the given dict's entries and returns it."""
    median = np.median([r["execution_time"] for r in profile_results.values()])
    for r in profile_results.values():
        B, t = r["bs"], r["execution_time"]
        if t > median:
            shrunk = max(1, int(B * median / t))
            r.update(bs=shrunk, execution_time=t * shrunk / B)
    return profile_results


def best_row(dp_results):
    """Of the profiled (ar, frames, bs, sp_size, time) rows, the first with the most
    bs / sp_size / time (samples per second per GPU)."""
    return max(dp_results, key=lambda row: row[2] / row[3] / row[4])


def _mismatch(t, target):
    """Over the target costs 1.2 per second, under it 1."""
    return (t - target) * 1.2 if t > target else (target - t) * 1


def _closest_count(exec_time, target, horizon):
    """(mismatch, count): the count in 1, 2, ... with exec_time * count <= horizon whose time
    is nearest the target by _mismatch, the smallest such count on ties."""
    counts = range(1, int(horizon / exec_time) + 1)
    scored = [(_mismatch(exec_time * g, target), g) for g in counts if exec_time * g <= horizon]
    return min(scored, key=lambda p: p[0], default=(float("inf"), None))


def calculate_grad_accumulation_num(exec_time_list, max_steps=5, min_steps=2):
    """Per rank, its gradient accumulation count. The horizon is max_steps times the slowest
    rank's time; each target is one rank's time times a count (within the horizon, ranks then
    counts in order); each rank takes its closest count to the target; the targets' summed
    mismatch decides (the first least). If the largest count is under min_steps, every count is
    scaled by ceil(min_steps / largest)."""
    horizon = max(exec_time_list) * max_steps
    best, best_score = None, float("inf")
    for ref in exec_time_list:
        for mult in range(1, int(horizon / ref) + 1):
            target = ref * mult
            if target > horizon:
                break
            picks = [_closest_count(e, target, horizon) for e in exec_time_list]
            score = sum(s for s, _ in picks)
            if score < best_score:
                best, best_score = [g for _, g in picks], score
    if max(best) < min_steps:
        scale = math.ceil(min_steps / max(best))
        best = [g * scale for g in best]
    return best
