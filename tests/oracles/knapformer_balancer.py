"""Oracle: KnapFormer's sequence-to-bag routing (its first, whole-sequence pass) and its gamma
fit.

Specifies the behaviour of github.com/Kai-46/KnapFormer (Adobe Research; Apache-2.0), read from
the mirror carlosbrian459/KnapFormer: knapformer/sequence_balancer.py (`workload_estimator`,
`SequenceBalancer._gather_workloads`, the first pass of `plan_routing`; commit
fdd4f6099a6d1d3d520c917b81e934428d5653ee) and knapformer/workload_estimator.py
(`TheoreticalWorkloadEstimator`'s gamma correction; commit
efda11b047b804a42e5ac4cb55d6e579220c1b83). This is an independent implementation of the
behaviour described; no source code copied. The later routing passes (chunking a sequence
across a bag's GPUs) are outside it.
"""

import numpy as np
import torch


def sequence_workload(L, d, gamma=1.0):
    """TFLOP-scale work of one length-L sequence at hidden size d (same float evaluation order
    as the source: linear term, then gamma-weighted attention term, over 1e12)."""
    return (24 * L * (d * d) + gamma * 4 * (L * L) * d) / 1e12


def plan_routing(gpu_seq_lens, d, gamma, bag_specs):
    """gpu_seq_lens: each GPU's local sequence lengths (concatenated in GPU order, the gather
    order); bag_specs: [(GPUs per bag, number of such bags)]. Returns (bag of each sequence in
    gather order, each bag's occupancy).

    Bags are numbered through the specs sorted by GPU count (stable). Every GPU has an equal
    share of the total work; a bag's capacity is its GPUs' share. Heaviest sequence first
    (stable on gather order), each goes to the least-occupied bag (lowest id on ties) whose
    capacity holds it and whose GPU count is at most its length, else to the least-occupied
    bag of the last spec (ties: see below); occupancy grows by work / capacity."""
    lengths = [L for lens in gpu_seq_lens for L in lens]
    work = [sequence_workload(L, d, gamma) for L in lengths]
    specs = sorted(bag_specs, key=lambda spec: spec[0])
    bag_size = [g for g, count in specs for _ in range(count)]
    fallback = list(range(len(bag_size) - specs[-1][1], len(bag_size)))
    share = sum(work) / sum(g * count for g, count in specs)
    capacity = [share * g for g in bag_size]
    occupancy = [0] * len(bag_size)
    bag_of = [None] * len(lengths)
    for s in sorted(range(len(lengths)), key=lambda s: work[s], reverse=True):
        fits = [
            b for b in range(len(bag_size)) if capacity[b] >= work[s] and lengths[s] >= bag_size[b]
        ]
        if not fits:
            # The source sorts the last spec's own bag list in place, so a fallback's ties go
            # to the order the previous fallback left, not to the lowest id.
            fallback.sort(key=lambda b: occupancy[b])
        b = min(fits or fallback, key=lambda b: occupancy[b])
        bag_of[s] = b
        occupancy[b] += work[s] / capacity[b]
    return bag_of, occupancy


def seq_len_test_list(seq_len_test_range=(448, 65536), seg_n_bins=10):
    """The measured sweep: seg_n_bins lengths evenly spaced over the range, cast to int32."""
    return np.linspace(*seq_len_test_range, seg_n_bins).astype(np.int32)


def benchmark_gamma(test_seq_lens, test_latencies, d_token):
    """gamma from the measured latencies: latency ~ k * (24 S d^2 + gamma * 4 S^2 d), solved as
    a float32 least-squares fit for (k, k * gamma) by torch.linalg.lstsq; gamma = their float32
    ratio."""
    S = torch.as_tensor(np.asarray(test_seq_lens, dtype=np.int32))
    linear = 24.0 * S * d_token**2
    quadratic = 4.0 * S * S * d_token
    design = torch.stack([linear, quadratic], dim=1).to(torch.float32)
    measured = torch.as_tensor(np.asarray(test_latencies), dtype=torch.float32)
    k, k_gamma = torch.linalg.lstsq(design, measured).solution
    return float(k_gamma / k)  # the ratio taken in float32, as the source's tensors give it
