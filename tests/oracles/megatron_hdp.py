"""Oracle: Megatron-LM's hybrid data x context parallel grouping, as it runs when every sample
fits one GPU.

Specifies the behaviour of `BalancedCPScheduler` in NVIDIA/Megatron-LM,
megatron/core/pipeline_parallel/hybrid_cp_schedule.py (its workload, GPUs-needed, equal-bucket,
next-group with overload trim, and group-sequence steps; commit
00caa53af30912914981c86f39db123961678bbd; BSD-3-Clause, Copyright (c) 2025 NVIDIA
CORPORATION). This is an independent implementation of the behaviour described; no source code
copied. There is no process group (the GPU count is an argument), and the step that splits one
sample across idle GPUs by context parallelism is not run: each group reports whether it would.

Behaviour reproduced:
- samples are taken longest first (a stable sort); a sample of length L needs
  cp(L) = max(1, 2 ** ceil(log2(L / max_len))) GPUs and costs L^2 / cp(L) on each;
- equal buckets: k = number of distinct cp sizes, target = total cost / k; walking the samples,
  a non-empty bucket closes before sample i when it would pass 1.1 * target or when the
  samples left (n - i) are at most k minus twice the buckets closed so far;
- placement: take the head of the first bucket that can be placed (an existing group of its cp
  size, or enough unassigned GPUs). Candidates: the existing group of its size whose slowest
  GPU is least loaded (the first created on ties), or the cp least-loaded unassigned GPUs (a
  stable sort by load, so by rank on ties), which form a new group when the slowest of them is
  below the existing group's load. The sample runs on every GPU of the group chosen;
- the group closes early once some sample needed fewer GPUs than the first one did, samples
  remain, and max - min load <= delta * max;
- trim: while max - min > delta * max, no GPU is idle, and the first most-loaded GPU holds more
  than one sample, its group's most recent sample is taken off every member if that lowers
  max - min; trimmed samples join the leftovers (after the unplaced ones, in trim order), which
  are the next group's input, in that order.
"""

from math import ceil, log2


def gpus_needed(L, max_len):
    return max(1, 2 ** ceil(log2(L / max_len)))


def workload(L, max_len):
    return (L * L) / gpus_needed(L, max_len)


def _equal_buckets(samples, cost, cp_of):
    """Consecutive runs of the (id, L) samples; see the module docstring for the cut rule."""
    k = len({cp_of(L) for _, L in samples})
    target = sum(cost(L, cp_of(L)) for _, L in samples) / k
    buckets, run, run_cost = [], [], 0.0
    for i, (sid, L) in enumerate(samples):
        c = cost(L)
        closed = len(buckets)
        if run and (run_cost + c > target * 1.1 or len(samples) - i <= k - 2 * closed):
            buckets.append(run)
            run, run_cost = [], 0.0
        run.append((sid, L))
        run_cost += c
    if run:
        buckets.append(run)
    return buckets


def next_group(samples, cost, total_gpus, max_len=10**9, delta=0.05):
    """One group from the (id, L) samples (longest first). Returns (sample ids per GPU,
    leftovers as (id, L) in order, per-GPU load, whether idle GPUs would be filled by CP)."""
    if not samples:
        return [[] for _ in range(total_gpus)], [], [0.0] * total_gpus, False

    def cp_of(L):
        return gpus_needed(L, max_len)

    queues = _equal_buckets(samples, cost, cp_of)
    load = [0.0] * total_gpus
    held = [[] for _ in range(total_gpus)]  # per GPU, its (id, L) in placement order
    groups = []  # (cp size, member ranks), in creation order
    group_of = [None] * total_gpus
    first_cp, shrank = None, False

    def placeable(L):
        free = sum(g is None for g in group_of)
        return any(size == cp_of(L) for size, _ in groups) or free >= cp_of(L)

    while queues:
        q = next((q for q in queues if q and placeable(q[0][1])), None)
        if q is None:
            break
        sid, L = q[0]
        need = cp_of(L)
        first_cp = need if first_cp is None else first_cp
        same = [g for g, (size, _) in enumerate(groups) if size == need]
        loads = [max(load[r] for r in groups[g][1]) for g in same]
        pick = same[loads.index(min(loads))] if same else None
        pick_load = min(loads) if same else float("inf")
        free = [r for r in range(total_gpus) if group_of[r] is None]
        if len(free) >= need:
            fresh = sorted(free, key=lambda r: load[r])[:need]
            if load[fresh[-1]] < pick_load:
                groups.append((need, fresh))
                pick = len(groups) - 1
                for r in fresh:
                    group_of[r] = pick
        c = cost(L)
        for r in groups[pick][1]:
            held[r].append((sid, L))
            load[r] += c
        q.pop(0)
        while queues and not queues[0]:
            queues.pop(0)
        shrank = shrank or need < first_cp
        if shrank and queues and max(load) - min(load) <= delta * max(load):
            break
    leftovers = [s for q in queues for s in q]

    while True:
        top, bottom = max(load), min(load)
        spread = top - bottom
        if spread <= delta * top or bottom == 0:
            break
        r = load.index(top)
        if len(held[r]) <= 1:
            break
        members = groups[group_of[r]][1]
        sid, L = held[r][-1]
        c = cost(L)
        after = [x - c if g in members else x for g, x in enumerate(load)]
        if max(after) - min(after) >= spread:
            break
        for g in members:
            held[g].pop()
            load[g] -= c
        leftovers.append((sid, L))
    ids = [[sid for sid, _ in h] for h in held]
    return ids, leftovers, load, any(not h for h in held)


def groups_and_subsamples(samples, total_gpus, max_len=10**9):
    """Per group, in order: (sample ids per GPU, whether idle GPUs would be filled by CP), from
    (id, L) samples in any order, costed by `workload`."""

    def cost(L, cp=None):
        return (L * L) / cp if cp is not None else workload(L, max_len)

    pending = sorted(samples, key=lambda s: s[1], reverse=True)
    out = []
    while pending:
        ids, pending, _, idle = next_group(pending, cost, total_gpus, max_len)
        out.append((ids, idle))
    return out
