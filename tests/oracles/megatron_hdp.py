"""Oracle: Megatron-LM's hybrid data x context parallel scheduler, as it runs when every sample
fits one GPU.

Source: NVIDIA/Megatron-LM, megatron/core/pipeline_parallel/hybrid_cp_schedule.py,
`BalancedCPScheduler` (`get_total_workload`, `gpus_needed`, `make_buckets_equal`,
`next_hdp_group` with its `trim_overload`, `get_groups_and_subsamples`; commit
00caa53af30912914981c86f39db123961678bbd). Licence: Megatron-LM's LICENSE (BSD-3-Clause for
this file), whose notice a port must retain:

    Copyright (c) 2025, NVIDIA CORPORATION. All rights reserved.
    Redistribution and use in source and binary forms, with or without modification, are
    permitted provided that the following conditions are met: * Redistributions of source code
    must retain the above copyright notice, this list of conditions and the following
    disclaimer. * Redistributions in binary form must reproduce the above copyright notice, this
    list of conditions and the following disclaimer in the documentation and/or other materials
    provided with the distribution. * Neither the name of NVIDIA CORPORATION nor the names of its
    contributors may be used to endorse or promote products derived from this software without
    specific prior written permission.
    THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS ``AS IS'' AND ANY EXPRESS OR IMPLIED
    WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE IMPLIED WARRANTIES OF MERCHANTABILITY AND
    FITNESS FOR A PARTICULAR PURPOSE ARE DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT OWNER OR
    CONTRIBUTORS BE LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR
    CONSEQUENTIAL DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR
    SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER CAUSED AND ON ANY
    THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY, OR TORT (INCLUDING NEGLIGENCE OR
    OTHERWISE) ARISING IN ANY WAY OUT OF THE USE OF THIS SOFTWARE, EVEN IF ADVISED OF THE
    POSSIBILITY OF SUCH DAMAGE.

This port is changed from the original: no
torch.distributed group (total_gpus is an argument), the lru_caches dropped, and
`fill_empty_gpus` (it splits one sample across the idle GPUs by context parallelism) is not run:
`empty_gpus` reports where it would have.

Kept: the samples sorted by length, descending (a stable sort); the bucket loop's choice of
group (an existing CP group of least load, ties to the first created; a new group from the free
GPUs of least load when its load is lower); check_balance set only when the CP size falls;
trim_overload on the first most-loaded GPU's most recent sample, while that lowers max - min and
max - min > delta * max and no GPU is empty; leftovers appended in trim order and scheduled, in
that order, as the next group.
"""

from collections import deque
from math import ceil, log2


class BalancedCPScheduler:
    def __init__(self, max_seq_len_per_rank, total_gpus):
        self.max_seq_len_per_rank = max_seq_len_per_rank
        self.total_hdp_gpus = total_gpus

    def get_total_workload(self, seq_length, cp_size=None):
        if cp_size is None:
            cp_size = self.gpus_needed(seq_length)
        return (seq_length * seq_length) / cp_size

    def gpus_needed(self, seq_len):
        return max(1, 2 ** ceil(log2(seq_len / self.max_seq_len_per_rank)))

    def make_buckets_equal(self, sample_seqlens, compute_estimator):
        seqlens = [s for _, s in sample_seqlens]
        k = len({self.gpus_needed(s) for s in seqlens})
        total_work = sum(compute_estimator(s, self.gpus_needed(s)) for _, s in sample_seqlens)
        target = total_work / k
        buckets, cur, cur_work = [], [], 0.0
        remaining_k = k
        for i, (sample_id, seq_len) in enumerate(sample_seqlens):
            work = compute_estimator(seq_len)
            if cur and (
                cur_work + work > target * 1.1
                or len(sample_seqlens) - i <= remaining_k - len(buckets)
            ):
                buckets.append(deque(cur))
                cur, cur_work = [], 0.0
                remaining_k -= 1
            cur.append((sample_id, seq_len))
            cur_work += work
        if cur:
            buckets.append(deque(cur))
        return buckets

    def next_hdp_group(self, sample_seqlens, compute_estimator, total_gpus, delta=0.05):
        """(sample ids per GPU, leftovers, exec times, whether fill_empty_gpus would run)."""
        if not sample_seqlens:
            return [[] for _ in range(total_gpus)], [], [0.0] * total_gpus, False
        buckets = self.make_buckets_equal(sample_seqlens, compute_estimator)
        micro_batches = [[] for _ in range(total_gpus)]
        exec_times = [0.0 for _ in range(total_gpus)]
        sample_ids_per_gpu = [[] for _ in range(total_gpus)]
        gpu_group_id = [None] * total_gpus
        group_members, group_size = {}, {}
        next_gid = 0
        prev_needed = None
        check_balance = False
        while buckets:
            sample_seq_tuple = bucket_idx = None
            for idx in range(len(buckets)):
                if not buckets[idx]:
                    continue
                cand = buckets[idx][0]
                needed = self.gpus_needed(cand[1])
                candidate_gids = [g for g, sz in group_size.items() if sz == needed]
                free_ranks = [r for r, g in enumerate(gpu_group_id) if g is None]
                if candidate_gids or len(free_ranks) >= needed:
                    sample_seq_tuple, bucket_idx = cand, idx
                    break
            if sample_seq_tuple is None:
                break
            sample_id, seq_len = sample_seq_tuple
            needed = self.gpus_needed(seq_len)
            if prev_needed is None:
                prev_needed = needed
            candidate_gids = [g for g, sz in group_size.items() if sz == needed]
            if candidate_gids:
                best_gid, best_load = min(
                    ((g, max(exec_times[r] for r in group_members[g])) for g in candidate_gids),
                    key=lambda t: t[1],
                )
            else:
                best_gid, best_load = None, float("inf")
            free_ranks = [r for r, g in enumerate(gpu_group_id) if g is None]
            if len(free_ranks) >= needed:
                new_members = sorted(free_ranks, key=lambda r: exec_times[r])[:needed]
                if exec_times[new_members[-1]] < best_load:
                    best_gid = None
                    chosen = new_members
                else:
                    chosen = group_members[best_gid]
            else:
                chosen = group_members[best_gid]
            if best_gid is None:
                best_gid = next_gid
                next_gid += 1
                group_members[best_gid] = chosen
                group_size[best_gid] = needed
                for r in chosen:
                    gpu_group_id[r] = best_gid
            per_gpu_cost = compute_estimator(seq_len)
            for r in chosen:
                micro_batches[r].append(seq_len)
                exec_times[r] += per_gpu_cost
                sample_ids_per_gpu[r].append(sample_id)
            buckets[bucket_idx].popleft()
            while buckets and not buckets[0]:
                buckets.pop(0)
            if needed < prev_needed:
                check_balance = True
            if (
                check_balance
                and buckets
                and max(exec_times) - min(exec_times) <= delta * max(exec_times)
            ):
                break
        leftovers = [t for b in buckets for t in b]

        while True:  # trim_overload
            cur_max, cur_min = max(exec_times), min(exec_times)
            cur_slack = cur_max - cur_min
            if cur_slack <= delta * cur_max or cur_min == 0:
                break
            max_r = exec_times.index(cur_max)
            members = group_members[gpu_group_id[max_r]]
            if len(micro_batches[max_r]) <= 1:
                break
            seq = micro_batches[max_r][-1]
            cost = compute_estimator(seq)
            proj = exec_times[:]
            for r in members:
                proj[r] -= cost
            if max(proj) - min(proj) < cur_slack:
                removed = sample_ids_per_gpu[max_r][-1]
                for r in members:
                    micro_batches[r].pop()
                    exec_times[r] -= cost
                    sample_ids_per_gpu[r].pop()
                leftovers.append((removed, seq))
            else:
                break
        empty = any(not mb for mb in micro_batches)
        return sample_ids_per_gpu, leftovers, exec_times, empty

    def get_groups_and_subsamples(self, sample_id_seqlens):
        """Per group: the sample ids per GPU, and whether fill_empty_gpus would run."""
        groups = []
        sample_id_seqlens = sorted(sample_id_seqlens, key=lambda x: x[1], reverse=True)
        while sample_id_seqlens:
            ids, sample_id_seqlens, _, empty = self.next_hdp_group(
                sample_id_seqlens, self.get_total_workload, self.total_hdp_gpus
            )
            groups.append((ids, empty))
        return groups
