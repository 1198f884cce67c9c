"""Oracle: Open-Sora's per-bucket batch-size search and its sampler's remainder rule.

Source: hpcaitech/Open-Sora, scripts/misc/search_bs.py (`benchmark`, the base bucket then the
others against its step time; commit 05927230222852aa89f297ab8b5fcd5d16584c64) and
opensora/datasets/sampler.py (`VariableVideoBatchSampler.__iter__`'s drop_last handling; commit
75c1718cc22f0f1e5fd146cf2e6071334f55d338); the drop_last=True it runs with is scripts/train.py's
(commit 000a3f887cf89ed8cd2e988bed31081a94c32f0b). Copyright 2021- HPC-AI Technology Inc.,
Apache License 2.0 (the repository's LICENSE; http://www.apache.org/licenses/LICENSE-2.0); this
port is a derived work under that licence, changed from the original: the training run that times a batch is a `step_time(B)` argument that
raises MemoryError where the batch does not fit, and the logging is dropped.
"""


def benchmark(step_time, lower_bound, upper_bound, ref_step_time=None):
    """(batch size, its step time): the largest B that runs, or with ref_step_time the B whose
    time is below it and closest to it (0, 0 when none)."""
    target_batch_size = target_step_time = 0
    if ref_step_time is not None:
        min_dis = float("inf")
    while lower_bound <= upper_bound:
        mid = (lower_bound + upper_bound) // 2
        try:
            t = step_time(mid)
            if ref_step_time is not None:
                if t < ref_step_time:
                    lower_bound = mid + 1
                    dis = abs(t - ref_step_time)
                    if dis < min_dis:
                        target_batch_size, target_step_time = mid, t
                        min_dis = dis
                else:
                    upper_bound = mid - 1
            else:
                target_batch_size, target_step_time = mid, t
                lower_bound = mid + 1
        except MemoryError:
            upper_bound = mid - 1
    return target_batch_size, target_step_time


def search(step_time_of, buckets, base):
    """{bucket: B}: buckets maps a bucket to its (lower, upper) bounds; base is the base bucket;
    step_time_of(bucket) gives that bucket's step_time(B)."""
    buckets = dict(buckets)
    base_bound = buckets.pop(base)
    base_bs, base_time = benchmark(step_time_of(base), *base_bound)
    out = {base: base_bs}
    for bucket, bounds in buckets.items():
        out[bucket] = benchmark(step_time_of(bucket), *bounds, ref_step_time=base_time)[0]
    return out


def drop_remainder(data_list, bs_per_gpu, drop_last=True):
    """A bucket's samples after the sampler's remainder rule: dropped (drop_last=True) or padded
    with the bucket's first samples."""
    remainder = len(data_list) % bs_per_gpu
    if remainder > 0:
        if not drop_last:
            data_list = data_list + data_list[: bs_per_gpu - remainder]
        else:
            data_list = data_list[:-remainder]
    return data_list
