"""Oracle: Open-Sora's per-bucket batch-size search and its sampler's remainder rule.

Specifies the behaviour of hpcaitech/Open-Sora (Apache-2.0): scripts/misc/search_bs.py
(`benchmark`: the base bucket searched first, the others against its step time; commit
05927230222852aa89f297ab8b5fcd5d16584c64) and opensora/datasets/sampler.py
(`VariableVideoBatchSampler.__iter__`'s drop_last handling; commit
75c1718cc22f0f1e5fd146cf2e6071334f55d338), run with scripts/train.py's drop_last=True (commit
000a3f887cf89ed8cd2e988bed31081a94c32f0b). This is an independent implementation of the
behaviour described; no source code copied. A training run that times batch B is a
`step_time(B)` argument that raises MemoryError where B does not fit.
"""


def _bisect(step_time, lo, hi, keep):
    """Binary search over [lo, hi] with midpoint (lo + hi) // 2: a batch that runs and that
    `keep(t)` accepts moves the search up, anything else (including MemoryError) down. Yields
    each accepted (B, t) in probe order."""
    while lo <= hi:
        mid = (lo + hi) // 2
        try:
            t = step_time(mid)
        except MemoryError:
            t = None
        if t is not None and keep(t):
            yield mid, t
            lo = mid + 1
        else:
            hi = mid - 1


def benchmark(step_time, lower_bound, upper_bound, ref_step_time=None):
    """(batch size, its step time), (0, 0) when none qualifies. Without ref_step_time: the last
    batch that runs (the largest). With it: among batches faster than the reference, the first
    probed of least |t - ref| (a later probe must be strictly closer to replace it)."""
    if ref_step_time is None:
        found = list(_bisect(step_time, lower_bound, upper_bound, lambda t: True))
        return found[-1] if found else (0, 0)
    best, best_gap = (0, 0), float("inf")
    for B, t in _bisect(step_time, lower_bound, upper_bound, lambda t: t < ref_step_time):
        if abs(t - ref_step_time) < best_gap:
            best, best_gap = (B, t), abs(t - ref_step_time)
    return best


def search(step_time_of, buckets, base):
    """{bucket: B}: buckets maps a bucket to its (lower, upper) bounds; the base bucket is
    searched for its largest batch, then every other bucket (in the mapping's order) for the
    batch whose time comes closest below the base's; step_time_of(bucket) gives that bucket's
    step_time(B)."""
    base_bs, base_time = benchmark(step_time_of(base), *buckets[base])
    out = {base: base_bs}
    for bucket, (lo, hi) in buckets.items():
        if bucket != base:
            out[bucket] = benchmark(step_time_of(bucket), lo, hi, ref_step_time=base_time)[0]
    return out


def drop_remainder(data_list, bs_per_gpu, drop_last=True):
    """A bucket's samples after the remainder rule: the last len % B dropped (drop_last=True) or
    the bucket padded up to a multiple of B with its own first samples."""
    extra = len(data_list) % bs_per_gpu
    if extra == 0:
        return data_list
    if drop_last:
        return data_list[: len(data_list) - extra]
    return data_list + data_list[: bs_per_gpu - extra]
