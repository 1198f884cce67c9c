"""Oracle: LoongForge's DP load balance and its warm-up fit.

Source: baidu-baige/LoongForge, loongforge/data/dp_balance/rebalance/balance.py
(`solve_sample_dp_reorder_plan`, commit b614ce7b1fdddf667b748d0fecb2229ca26080fa) and
loongforge/data/dp_balance/rebalance/warmup.py (`solve_computation_coef`, commit
ccc25e25457c265e55dbaf2d5d55e7069f68d2b1); defaults from loongforge/train/arguments.py (commit
c6275661). Copyright 2026 The LoongForge Authors, SPDX-License-Identifier: Apache-2.0
(http://www.apache.org/licenses/LICENSE-2.0); this port is a derived work under that licence,
changed from the original: the DP group, args and logging are replaced by arguments, and the
plan is returned as the rank of each sample (in input order) instead of (local_idx, src_rank)
lists.
"""

import numpy as np
from scipy.optimize import minimize


def solve_sample_dp_reorder_plan(
    lengths,
    src_ranks,
    dp_size,
    cost_fn,
    pack_len_ratio=1.2,
    max_iter=20,
    swap_tolerance=0.05,
    dp_historical_costs=None,
    trigger_threshold=0.2,
):
    """(rank of each sample or None where it skips, this micro-batch's cost per rank)."""
    items = []
    seq_lens = []
    for k, (sample_len, src_rank) in enumerate(zip(lengths, src_ranks)):
        seq_len = int(sample_len)
        items.append((float(cost_fn(float(sample_len))), seq_len, k, int(src_rank)))
        seq_lens.append(seq_len)

    current = [0.0] * dp_size
    for cost, _, _, src in items:
        current[src] += cost
    has_history = dp_historical_costs is not None and any(c > 0 for c in dp_historical_costs)
    total = (
        [dp_historical_costs[i] + current[i] for i in range(dp_size)] if has_history else current
    )
    avg = sum(total) / dp_size
    imbalance = (max(total) / avg) - 1 if avg > 0 else 0
    if max(item[0] for item in items) > avg or imbalance < trigger_threshold:
        return None, current

    items.sort(key=lambda x: x[0], reverse=True)
    dp_costs = list(dp_historical_costs) if has_history else [0.0] * dp_size
    buckets = [[] for _ in range(dp_size)]
    use_cap = pack_len_ratio is not None
    if use_cap:
        pack_cap = sum(seq_lens) / dp_size * pack_len_ratio
        pack_lens = [0] * dp_size

        def can_place(r, seq_len):
            return pack_lens[r] + seq_len <= pack_cap
    else:
        pack_lens = None

        def can_place(r, seq_len):
            return True

    for item in items:
        cost, seq_len = item[0], item[1]
        placed = False
        for r in sorted(range(dp_size), key=lambda i: dp_costs[i]):
            if can_place(r, seq_len):
                buckets[r].append(item)
                dp_costs[r] += cost
                if pack_lens is not None:
                    pack_lens[r] += seq_len
                placed = True
                break
        if not placed:
            r = min(range(dp_size), key=lambda i: dp_costs[i])
            buckets[r].append(item)
            dp_costs[r] += cost
            if pack_lens is not None:
                pack_lens[r] += seq_len

    for _ in range(max_iter):
        max_r = max(range(dp_size), key=lambda i: dp_costs[i])
        min_r = min(range(dp_size), key=lambda i: dp_costs[i])
        if (dp_costs[max_r] - dp_costs[min_r]) / max(dp_costs[min_r], 1e-6) < swap_tolerance:
            break
        max_b, min_b = buckets[max_r], buckets[min_r]
        if not max_b or not min_b:
            break
        a = max(max_b, key=lambda x: x[0])
        b = min(min_b, key=lambda x: x[0])
        cost_a, len_a = a[0], a[1]
        cost_b, len_b = b[0], b[1]
        old_diff = max(dp_costs) - min(dp_costs)
        if (not use_cap) or (pack_lens[min_r] + len_a <= pack_cap):
            move = list(dp_costs)
            move[max_r] -= cost_a
            move[min_r] += cost_a
            move_diff = max(move) - min(move)
        else:
            move_diff = float("inf")
        if (not use_cap) or (
            pack_lens[max_r] - len_a + len_b <= pack_cap
            and pack_lens[min_r] - len_b + len_a <= pack_cap
        ):
            swap = list(dp_costs)
            swap[max_r] = dp_costs[max_r] - cost_a + cost_b
            swap[min_r] = dp_costs[min_r] - cost_b + cost_a
            swap_diff = max(swap) - min(swap)
        else:
            swap_diff = float("inf")
        if move_diff < old_diff or swap_diff < old_diff:
            if move_diff <= swap_diff:
                max_b.pop(max_b.index(a))
                min_b.append(a)
                dp_costs = move
                if use_cap:
                    pack_lens[max_r] -= len_a
                    pack_lens[min_r] += len_a
            else:
                max_b.pop(max_b.index(a))
                min_b.pop(min_b.index(b))
                max_b.append(b)
                min_b.append(a)
                dp_costs = swap
                if use_cap:
                    pack_lens[max_r] = pack_lens[max_r] - len_a + len_b
                    pack_lens[min_r] = pack_lens[min_r] - len_b + len_a
        else:
            break

    hist = dp_historical_costs if has_history else [0.0] * dp_size
    rank = [None] * len(items)
    for r, bucket in enumerate(buckets):
        for item in bucket:
            rank[item[2]] = r
    return rank, [dp_costs[i] - hist[i] for i in range(dp_size)]


def solve_computation_coef(var_groups, C, init=(0, 0, 0)):
    """(SEQ2_COEF, SEQ_COEF, SEQ_NUM_COEF) from per-iteration [(sum L^2, sum L, count)] per DP
    rank and the iterations' measured times."""
    S_a, S_b, S_c = 1e8, 1e4, 1e1

    def softmax_max(vals, alpha=20):
        vals = np.array(vals, dtype=float)
        m = vals.max()
        return m + (1 / alpha) * np.log(np.sum(np.exp(alpha * (vals - m))))

    def loss(vars, var_groups, C):
        x_t, y_t, z_t = vars
        err = 0.0
        for terms, Ci in zip(var_groups, C):
            vals = [(a / S_a) * x_t + (b / S_b) * y_t + (c / S_c) * z_t for (a, b, c) in terms]
            err += (softmax_max(vals) - Ci) ** 2
        return err

    res = minimize(loss, init, args=(var_groups, C), bounds=[(0, None)] * 3)
    return res.x[0] / S_a, res.x[1] / S_b, res.x[2] / S_c
