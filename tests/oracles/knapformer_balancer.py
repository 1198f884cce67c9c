"""Oracle: KnapFormer's sequence balancer (its routing plan) and its gamma fit.

Source: github.com/Kai-46/KnapFormer (Adobe Research), read from the mirror
carlosbrian459/KnapFormer: knapformer/sequence_balancer.py (`workload_estimator`,
`SequenceBalancer._gather_workloads` and the first pass of `plan_routing`, commit
fdd4f6099a6d1d3d520c917b81e934428d5653ee) and knapformer/workload_estimator.py
(`TheoreticalWorkloadEstimator`, commit efda11b047b804a42e5ac4cb55d6e579220c1b83). Apache
License 2.0 (the repository's LICENSE; http://www.apache.org/licenses/LICENSE-2.0); this port is
a derived work under that licence, changed from the original: the process groups and
all-gathers are replaced by per-GPU length lists, the bag specs string by (gpus per bag, bags)
pairs, the routing's later passes (chunking across a bag's GPUs) are left out, and the measured
latencies are an argument.
"""

import numpy as np
import torch


def workload_estimator(seq_len, d, gamma=1.0):
    return (24 * seq_len * (d * d) + gamma * 4 * (seq_len * seq_len) * d) / 1e12


def plan_routing(gpu_seq_lens, d, gamma, bag_specs):
    """gpu_seq_lens: per GPU of the balance group, its local sequence lengths; bag_specs:
    [(gpus per bag, number of such bags)]. Returns (bag of each sequence in gather order,
    occupancy of each bag)."""
    seq_len, seq_workload = {}, {}
    sid = 0
    for lens in gpu_seq_lens:
        for L in lens:
            seq_len[sid] = L
            seq_workload[sid] = workload_estimator(L, d, gamma)
            sid += 1
    bag_gpus, options2bags = {}, {}
    specs = sorted(bag_specs, key=lambda x: x[0])
    bag_id = 0
    for gpus, count in specs:
        options2bags[gpus] = []
        for _ in range(count):
            options2bags[gpus].append(bag_id)
            bag_gpus[bag_id] = gpus
            bag_id += 1
    options = [g for g, _ in specs]
    per_gpu_capacity = sum(seq_workload.values()) / sum(g * n for g, n in specs)
    capacity = {b: per_gpu_capacity * g for b, g in bag_gpus.items()}
    occupancy = dict.fromkeys(bag_gpus, 0)
    assigned = {}
    for s, w in sorted(seq_workload.items(), key=lambda x: x[1], reverse=True):
        cands = [b for b in capacity if capacity[b] >= w and seq_len[s] >= bag_gpus[b]]
        if len(cands) == 0:
            cands = options2bags[options[-1]]
        cands.sort(key=lambda x: occupancy[x])
        assigned[s] = cands[0]
        occupancy[cands[0]] += w / capacity[cands[0]]
    return [assigned[s] for s in range(sid)], [occupancy[b] for b in sorted(occupancy)]


def seq_len_test_list(seq_len_test_range=(448, 65536), seg_n_bins=10):
    return np.linspace(seq_len_test_range[0], seq_len_test_range[1], seg_n_bins).astype(np.int32)


def benchmark_gamma(test_seq_lens, test_latencies, d_token):
    """gamma as benchmark_workload with gamma_correction=True solves it (torch, float32)."""
    S = torch.tensor(np.asarray(test_seq_lens), dtype=torch.int32)
    A = torch.zeros(len(S), 2, dtype=torch.float32)
    A[:, 0] = 24.0 * S * d_token**2
    A[:, 1] = 4.0 * S * S * d_token
    b = torch.tensor(np.asarray(test_latencies), dtype=torch.float32)
    k, k_times_gamma = torch.linalg.lstsq(A, b).solution
    return float(k_times_gamma / k)
