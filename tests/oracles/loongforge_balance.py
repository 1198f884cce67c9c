"""Oracle: LoongForge's data-parallel reorder of one micro-batch and its warm-up cost fit.

Specifies the behaviour of baidu-baige/LoongForge (Apache-2.0, Copyright 2026 The LoongForge
Authors): loongforge/data/dp_balance/rebalance/balance.py (`solve_sample_dp_reorder_plan`;
commit b614ce7b1fdddf667b748d0fecb2229ca26080fa), loongforge/data/dp_balance/rebalance/warmup.py
(`solve_computation_coef`; commit ccc25e25457c265e55dbaf2d5d55e7069f68d2b1), defaults from
loongforge/train/arguments.py (commit c6275661). This is an independent implementation of the
behaviour described; no source code copied. The DP group, args and logging are arguments; the
plan is given as the rank of each sample (input order).
"""

import numpy as np
from scipy.optimize import minimize


def _first_min(values, among):
    return min(among, key=lambda i: values[i])


def _first_max(values, among):
    return max(among, key=lambda i: values[i])


def _spread(values):
    return max(values) - min(values)


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
    """(rank of each sample, or None where the reorder skips; this micro-batch's cost per rank).

    Skip: when the heaviest sample costs more than the mean rank total (history plus this
    micro-batch, history counted only if some entry is > 0) or max / mean - 1 is under
    trigger_threshold; the costs are then the source ranks'.
    Greedy: heaviest first (stable), each sample goes to the least-loaded rank (stable order of
    loads, history included) whose packed length stays within mean length * pack_len_ratio,
    else to the least-loaded rank regardless.
    Refine, at most max_iter times, while (max - min) / max(min, 1e-6) >= swap_tolerance and both
    extreme ranks hold samples: with a = the max rank's first heaviest sample and b = the min
    rank's first lightest, try moving a to the min rank and swapping a with b (each only within
    the length cap); take the move if it is no worse than the swap, else the swap, but only if
    one of them lowers max - min (stop otherwise). Moved samples go to the end of a rank's list.
    """
    n = len(lengths)
    cost = [float(cost_fn(float(x))) for x in lengths]
    length = [int(x) for x in lengths]
    src = [int(r) for r in src_ranks]
    mb_cost = [0.0] * dp_size
    for k in range(n):
        mb_cost[src[k]] += cost[k]
    history = dp_historical_costs
    if history is None or not any(c > 0 for c in history):
        history = None
    total = mb_cost if history is None else [h + c for h, c in zip(history, mb_cost)]
    mean = sum(total) / dp_size
    imbalance = max(total) / mean - 1 if mean > 0 else 0
    if max(cost) > mean or imbalance < trigger_threshold:
        return None, mb_cost

    ranks = range(dp_size)
    load = [0.0] * dp_size if history is None else list(history)
    packed = [0] * dp_size
    held = [[] for _ in ranks]
    cap = None if pack_len_ratio is None else sum(length) / dp_size * pack_len_ratio

    def fits(r, extra):
        return cap is None or packed[r] + extra <= cap

    for k in sorted(range(n), key=lambda k: cost[k], reverse=True):
        by_load = sorted(ranks, key=lambda r: load[r])
        r = next((r for r in by_load if fits(r, length[k])), by_load[0])
        held[r].append(k)
        load[r] += cost[k]
        packed[r] += length[k]

    for _ in range(max_iter):
        hi, lo = _first_max(load, ranks), _first_min(load, ranks)
        if (load[hi] - load[lo]) / max(load[lo], 1e-6) < swap_tolerance:
            break
        if not held[hi] or not held[lo]:
            break
        a, b = _first_max(cost, held[hi]), _first_min(cost, held[lo])
        before = _spread(load)
        moved = swapped = None
        if fits(lo, length[a]):
            moved = list(load)
            moved[hi] -= cost[a]
            moved[lo] += cost[a]
        if fits(hi, length[b] - length[a]) and fits(lo, length[a] - length[b]):
            swapped = list(load)
            swapped[hi] = load[hi] - cost[a] + cost[b]
            swapped[lo] = load[lo] - cost[b] + cost[a]
        move_gap = _spread(moved) if moved else float("inf")
        swap_gap = _spread(swapped) if swapped else float("inf")
        if not (move_gap < before or swap_gap < before):
            break
        held[hi].remove(a)
        if move_gap <= swap_gap:
            held[lo].append(a)
            load = moved
            packed[hi] -= length[a]
            packed[lo] += length[a]
        else:
            held[lo].remove(b)
            held[hi].append(b)
            held[lo].append(a)
            load = swapped
            packed[hi] += length[b] - length[a]
            packed[lo] += length[a] - length[b]

    rank = [None] * n
    for r in ranks:
        for k in held[r]:
            rank[k] = r
    base = [0.0] * dp_size if history is None else history
    return rank, [load[r] - base[r] for r in ranks]


# LoongForge scales each coefficient so the optimiser sees numbers near 1.
COEF_SCALES = np.array([1e8, 1e4, 1e1])


def _smooth_max(values, alpha=20):
    """max + log(sum exp(alpha * (v - max))) / alpha: a smooth upper bound on the max."""
    top = values.max()
    return top + (1 / alpha) * np.log(np.sum(np.exp(alpha * (values - top))))


def solve_computation_coef(var_groups, C, init=(0, 0, 0)):
    """(SEQ2_COEF, SEQ_COEF, SEQ_NUM_COEF) >= 0 minimising, by scipy's bounded minimize from
    `init` in scaled units, the sum over iterations of (smooth max over ranks of the predicted
    rank time - the iteration's measured time)^2; var_groups holds per iteration, per rank,
    (sum L^2, sum L, count)."""
    terms = [np.asarray(g, dtype=float) / COEF_SCALES for g in var_groups]

    def loss(v):
        err = 0.0
        for g, measured in zip(terms, C):
            pred = g[:, 0] * v[0] + g[:, 1] * v[1] + g[:, 2] * v[2]
            err += (_smooth_max(pred) - measured) ** 2
        return err

    x = minimize(loss, init, bounds=[(0, None)] * 3).x
    return x[0] / COEF_SCALES[0], x[1] / COEF_SCALES[1], x[2] / COEF_SCALES[2]
