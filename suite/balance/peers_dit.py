"""Two DiT-era balancers as Plan policies: KnapFormer's compute bags and LoongForge's DP balance.

Each follows its project's code (read for this; the code here is ours; tests/oracles holds
independent implementations of each project's behaviour that the tests check these against).

- KnapFormer (Zhang et al., Adobe Research; arXiv 2508.06001, github.com/Kai-46/KnapFormer;
  `knapformer/sequence_balancer.py`, `workload_estimator.py`): every rank of a balancing group
  gathers the sequence lengths of the group's local batches; `SequenceBalancer.plan_routing`
  prices each `workload_estimator` = (24*S*d^2 + gamma*4*S^2*d) / 1e12, gives every bag the
  capacity total / GPUs x its GPUs, and assigns the sequences largest first (a stable sort), each
  to the bag of least occupancy (its workloads / its capacity; ties to the first bag) among the
  bags whose capacity holds it (all bags of the largest size when none does). gamma comes from
  `TheoreticalWorkloadEstimator.benchmark_workload`: one sequence's latency measured at 10
  lengths, linspace(448, 65536), and latency = k*24*S*d^2 + k*gamma*4*S^2*d solved by least
  squares (torch.linalg.lstsq, unconstrained), gamma = (k*gamma) / k. `KnapFormerBags`.
- LoongForge (Baidu Baige; `loongforge/data/dp_balance/rebalance/balance.py`, `warmup.py`,
  `loongforge/train/arguments.py`): each DP rank's data loader delivers fixed-length packs; per
  micro-batch, `solve_sample_dp_reorder_plan` gathers every rank's samples, prices each
  x*L^2 + y*L + z, adds the costs of the step's earlier micro-batches (`_MicroBatchLoadTracker`),
  and keeps the packs as they are when max / mean - 1 < 0.2 (--dp-balance-trigger-threshold-vlm)
  or one sample outweighs the mean rank load. Otherwise it assigns the samples largest first
  (stable), each to the least-loaded rank whose tokens stay within 1.2 x the mean tokens per rank
  (--dp-balance-max-len-ratio-vlm; the least-loaded rank when none has room), then refines:
  up to 20 times, unless (max - min) / min < 0.05, it moves the most-loaded rank's costliest
  sample to the least-loaded rank, or swaps it with that rank's cheapest, whichever lowers
  max - min more (moves win ties), within the token cap. x, y, z come from warm-up
  (`solve_computation_coef`): iterations 3..11 (--vlm-dp-balance-warmup-iters 2..11, the first
  not recorded) record each rank's (sum L^2, sum L, count) and the measured iteration time in
  ms; scipy's minimize from (0, 0, 0) with bounds >= 0 fits the sum over iterations of
  (softmax-max over ranks of the predicted loads - time)^2 (alpha = 20; the terms scaled by 1e8,
  1e4, 10). Before the fit, x, y, z = 0, 1, 0. `FittedRankCost`.

Deviations, deliberate (tests/test_peer_oracles.py shows each):
- One bag per rank: every sample here fits one GPU (S <= M_mem), so KnapFormer's multi-GPU bags
  and sequence parallelism do not arise; the bag is the rank.
- KnapFormer's gamma sweep times one sequence's forward pass; here the latency at each length is
  the cost model's step time for one sample, cost.predict(1, S), solved in float64 (KnapFormer
  solves in float32); a negative gamma (a fit KnapFormer would use as is) is clipped to 0 so
  that no workload is negative.
- The step's global batch: the epoch's shuffled stream (seeded by (seed, epoch)) cut into packs
  of at most M_mem tokens, one per rank per micro-batch (MICRO_BATCHES per step); each rank's
  share of a step is packed into model batches under M_mem (Plan.from_assignment).
- LoongForge's warm-up runs on the job's own ranks; here it runs before the world is known, on
  WARMUP_RANKS ranks of a corpus drawn from the data's bucket table, each iteration timed as the
  slowest rank's seconds under the cost's step model (one model batch per distinct length).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from suite.balance.global_policy import greedy_partition
from suite.balance.peers import lengths_of
from suite.balance.plan import Plan

WIDTH = 5120  # Wan-14B's model width d
GAMMA_SWEEP = np.linspace(448, 65536, 10).astype(np.int32)  # KnapFormer's default test lengths
WARMUP_ITERS = 9  # LoongForge's default warm-up records iterations 3..11
WARMUP_RANKS = 8
MICRO_BATCHES = 1  # packs per rank per step
TRIGGER = 0.2  # LoongForge: skip below this imbalance (max / mean - 1)
PACK_LEN_RATIO = 1.2  # LoongForge: a rank's tokens <= this x the mean
MAX_ITER, SWAP_TOLERANCE = 20, 0.05  # LoongForge's refinement
COEF_SCALES = np.array([1e8, 1e4, 1e1])  # LoongForge's S_a, S_b, S_c


# ----------------------------------------------------------------------------- shared pieces


def step_windows(tokens_in_order, budget: float) -> np.ndarray:
    """Boundaries (len windows + 1) cutting a stream of token counts into consecutive windows of
    at most `budget` tokens (a sample over the budget alone makes its own window)."""
    t = np.asarray(tokens_in_order, np.int64)
    cum = np.concatenate([[0], np.cumsum(t)]).astype(float)  # exact; searched with floats
    bounds, start = [0], 0
    while start < len(t):
        end = int(np.searchsorted(cum, cum[start] + budget * (1 + 1e-12), side="right")) - 1
        start = max(end, start + 1)
        bounds.append(start)
    return np.asarray(bounds, np.int64)


def step_model(cost):
    return cost.step_model() if hasattr(cost, "step_model") else cost


# ----------------------------------------------------------------------------- KnapFormer


def knapformer_bags(workloads, bags: int) -> tuple[np.ndarray, np.ndarray]:
    """(bag of each sequence, occupancy of each bag): plan_routing's first pass with one GPU per
    bag. Every bag has the capacity total / bags (summed in order, as Python's sum), so the
    capacity filter keeps all bags or none (then all bags again): the assignment is largest first
    to the least occupancy, occupancy summed as workload / capacity."""
    w = np.asarray(workloads, float)
    if len(w) == 0:
        return np.zeros(0, np.int64), np.zeros(bags)
    capacity = float(np.cumsum(w)[-1]) / bags
    return greedy_partition(w / capacity, bags)


def fit_gamma(S, seconds, width: int = WIDTH) -> float:
    """KnapFormer's gamma: latency = k*24*S*d^2 + (k*gamma)*4*S^2*d by least squares; gamma =
    (k*gamma) / k (1.0 where fewer than two lengths make it unidentified)."""
    S, t = np.asarray(S, float), np.asarray(seconds, float)
    if np.unique(S).size < 2:
        return 1.0
    A = np.column_stack([24.0 * S * width**2, 4.0 * S * S * width])
    k, k_gamma = np.linalg.lstsq(A, t, rcond=None)[0]
    return float(k_gamma / k) if k != 0 else float("inf")


@dataclass(frozen=True)
class KnapFormerBags:
    """KnapFormer: per-rank compute bags filled largest first on its workload estimator."""

    m_mem: float
    gamma: float = 1.0
    width: int = WIDTH
    name: str = "knapformer"

    def __post_init__(self) -> None:
        if not 0 <= self.gamma < np.inf:
            raise ValueError(f"gamma must be a finite number >= 0, got {self.gamma}")

    @classmethod
    def fit(cls, cost, buckets, m_mem: float, width: int = WIDTH) -> KnapFormerBags:
        """gamma by KnapFormer's sweep, timed by the cost's step model (module docstring)."""
        lengths_of(buckets)  # the data must hold a length; the sweep is KnapFormer's own
        t = np.asarray(step_model(cost).predict(1, GAMMA_SWEEP), float)
        gamma = fit_gamma(GAMMA_SWEEP, t, width)
        return cls(float(m_mem), max(0.0, gamma) if np.isfinite(gamma) else 1.0, width)

    def sample_cost(self, S) -> np.ndarray:
        """workload_estimator, term by term as KnapFormer computes it."""
        S, d = np.asarray(S, float), float(self.width)
        return (24 * S * (d * d) + self.gamma * 4 * (S * S) * d) / 1e12

    def epoch_plan(self, tokens, world: int, seed: int, epoch: int) -> Plan:
        """Per step the stream's next world * M_mem tokens (each rank's local batch), bagged."""
        tokens = np.asarray(tokens, np.int64)
        if tokens.max() > self.m_mem:
            raise ValueError(f"a sample of {tokens.max()} tokens exceeds M_mem = {self.m_mem:.0f}")
        order = np.random.default_rng([seed, epoch]).permutation(len(tokens))
        bounds = step_windows(tokens[order], world * self.m_mem)
        cost = self.sample_cost(tokens[order])
        rank = np.empty(len(order), np.int64)
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            rank[lo:hi] = knapformer_bags(cost[lo:hi], world)[0]
        step = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
        return Plan.from_assignment(
            world, len(bounds) - 1, order, step, rank, tokens, self.m_mem, self.name
        )


# ----------------------------------------------------------------------------- LoongForge


def loongforge_reorder(
    costs,
    lengths,
    source,
    ranks: int,
    history=None,
    pack_len_ratio: float | None = PACK_LEN_RATIO,
    trigger: float = TRIGGER,
    max_iter: int = MAX_ITER,
    swap_tolerance: float = SWAP_TOLERANCE,
) -> tuple[np.ndarray | None, np.ndarray]:
    """solve_sample_dp_reorder_plan on one micro-batch: (the rank of each sample, or None where
    it keeps the packs; each rank's cost from this micro-batch). Samples in gather order (by
    source rank); `history`: the step's earlier micro-batches' costs per rank."""
    c, L = np.asarray(costs, float), np.asarray(lengths, np.int64)
    src = np.asarray(source, np.int64)
    current = np.bincount(src, weights=c, minlength=ranks).astype(float)
    hist = None if history is None or not (np.asarray(history) > 0).any() else np.array(history)
    total = current + hist if hist is not None else current
    mean = float(np.cumsum(total)[-1]) / ranks  # summed in order, as LoongForge's sum()
    imbalance = total.max() / mean - 1 if mean > 0 else 0
    if c.max() > mean or imbalance < trigger:
        return None, current
    order = np.argsort(-c, kind="stable")
    loads = hist.astype(float).copy() if hist is not None else np.zeros(ranks)
    tokens = np.zeros(ranks, np.int64)
    cap = L.sum() / ranks * pack_len_ratio if pack_len_ratio is not None else np.inf
    owner = np.empty(len(c), np.int64)
    members = [[] for _ in range(ranks)]  # per rank, its samples in placement order
    heap = [(float(v), r) for r, v in enumerate(loads)]  # ranks by (load, rank): the scan order
    heapq.heapify(heap)
    cost, length, load, tok = c.tolist(), L.tolist(), loads.tolist(), tokens.tolist()
    for i in order.tolist():
        full = []  # the least-loaded ranks without room, in scan order
        while heap and tok[heap[0][1]] + length[i] > cap:
            full.append(heapq.heappop(heap))
        _, r = heapq.heappop(heap) if heap else full.pop(0)  # none with room: the least loaded
        owner[i] = r
        members[r].append(i)
        load[r] += cost[i]
        tok[r] += length[i]
        heapq.heappush(heap, (load[r], r))
        for entry in full:
            heapq.heappush(heap, entry)
    loads, tokens = np.asarray(load, float), np.asarray(tok, np.int64)
    for _ in range(max_iter):
        hi, lo = int(np.argmax(loads)), int(np.argmin(loads))
        if (loads[hi] - loads[lo]) / max(loads[lo], 1e-6) < swap_tolerance:
            break
        if not members[hi] or not members[lo]:
            break
        a = max(members[hi], key=lambda j: c[j])
        b = min(members[lo], key=lambda j: c[j])
        old = loads.max() - loads.min()
        move = loads.copy()
        move[hi] -= c[a]
        move[lo] += c[a]
        move_diff = move.max() - move.min() if tokens[lo] + L[a] <= cap else np.inf
        swap = loads.copy()
        swap[hi] = loads[hi] - c[a] + c[b]
        swap[lo] = loads[lo] - c[b] + c[a]
        fits = tokens[hi] - L[a] + L[b] <= cap and tokens[lo] - L[b] + L[a] <= cap
        swap_diff = swap.max() - swap.min() if fits else np.inf
        if not (move_diff < old or swap_diff < old):
            break
        members[hi].remove(a)
        members[lo].append(a)
        owner[a] = lo
        if move_diff <= swap_diff:
            loads, tokens[hi], tokens[lo] = move, tokens[hi] - L[a], tokens[lo] + L[a]
        else:
            members[lo].remove(b)
            members[hi].append(b)
            owner[b] = hi
            loads = swap
            tokens[hi], tokens[lo] = tokens[hi] - L[a] + L[b], tokens[lo] - L[b] + L[a]
    return owner, loads - (hist if hist is not None else 0.0)


def softmax_max(vals, alpha: float = 20.0) -> float:
    """LoongForge's smooth max over ranks (the slowest rank sets the iteration time)."""
    v = np.asarray(vals, float)
    m = v.max()
    return float(m + (1 / alpha) * np.log(np.sum(np.exp(alpha * (v - m)))))


def fit_rank_cost(groups, times_ms) -> tuple[float, float, float]:
    """solve_computation_coef: x, y, z >= 0 minimising the sum over iterations of (softmax-max
    over ranks of x*sum L^2 + y*sum L + z*count - the iteration's ms)^2; `groups` (iterations,
    ranks, 3) holds each rank's (sum L^2, sum L, count)."""
    G = np.asarray(groups, float) / COEF_SCALES  # per term, as LoongForge scales them
    t = np.asarray(times_ms, float)

    def loss(v):
        loads = G[..., 0] * v[0] + G[..., 1] * v[1] + G[..., 2] * v[2]
        return sum((softmax_max(row) - ti) ** 2 for row, ti in zip(loads, t))

    res = minimize(loss, (0, 0, 0), bounds=[(0, None)] * 3)
    x, y, z = res.x / COEF_SCALES
    return float(x), float(y), float(z)


def pack_source(tokens_in_order, m_mem: float, world: int, micro_batches: int):
    """The fixed-length packs of a stream: (step, micro-batch, source rank) of each sample; a
    step is world * micro_batches consecutive packs of <= m_mem tokens."""
    bounds = step_windows(tokens_in_order, m_mem)
    pack = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
    slot = pack % (world * micro_batches)
    return pack // (world * micro_batches), slot // world, slot % world


def rebalance_packs(sample_cost, tokens_in_order, step, micro, src, world: int) -> np.ndarray:
    """The rank of each sample after LoongForge's reorder of every micro-batch, with the step's
    earlier micro-batches' costs carried (the packs' own ranks where it skips)."""
    rank = src.copy()
    cost = sample_cost(tokens_in_order)
    key = np.stack([step, micro])
    order = np.lexsort((src, micro, step))  # each micro-batch in gather order: by source rank
    cuts = np.flatnonzero(np.any(np.diff(key[:, order], axis=1), axis=0)) + 1
    history, last = np.zeros(world), None
    for sel in np.split(order, cuts):
        if step[sel[0]] != last:
            history, last = np.zeros(world), step[sel[0]]
        owner, mb_cost = loongforge_reorder(
            cost[sel], tokens_in_order[sel], src[sel], world, history
        )
        if owner is not None:
            rank[sel] = owner
        history = history + mb_cost
    return rank


def warmup_groups(
    cost, buckets, m_mem: float, iters: int = WARMUP_ITERS, ranks: int = WARMUP_RANKS, seed=0
) -> tuple[np.ndarray, np.ndarray]:
    """LoongForge's warm-up records on a corpus drawn from the bucket table (S, share): per
    iteration each rank's (sum L^2, sum L, count), and the iteration's ms (the slowest rank
    under the step model; one model batch per distinct length), balanced meanwhile on L (x, y,
    z = 0, 1, 0)."""
    if not isinstance(buckets, pd.DataFrame) or not {"S", "share"} <= set(buckets.columns):
        raise ValueError("warmup_groups needs a bucket table with columns S and share")
    share = buckets.groupby("S")["share"].sum()
    S, share = share.index.to_numpy(np.int64), share.to_numpy(float)
    rng = np.random.default_rng([seed, 0x10F])
    n = int(4 * iters * ranks * MICRO_BATCHES * m_mem / float(np.dot(share / share.sum(), S)))
    stream = rng.choice(S, size=n + 16, p=share / share.sum())
    step, micro, src = pack_source(stream, m_mem, ranks, MICRO_BATCHES)
    keep = step < iters
    stream, step, micro, src = stream[keep], step[keep], micro[keep], src[keep]
    rank = rebalance_packs(lambda s: np.asarray(s, float), stream, step, micro, src, ranks)
    d = pd.DataFrame({"k": step, "r": rank, "S": stream, "sq": stream.astype(float) ** 2})
    mb = d.groupby(["k", "r", "S"]).size().rename("B").reset_index()
    mb["s"] = np.asarray(step_model(cost).predict(mb["B"].to_numpy(), mb["S"].to_numpy()), float)
    secs = (
        mb.groupby(["k", "r"])["s"]
        .sum()
        .unstack(fill_value=0.0)
        .reindex(index=range(iters), columns=range(ranks), fill_value=0.0)
    )
    agg = d.groupby(["k", "r"]).agg(sq=("sq", "sum"), L=("S", "sum"), n=("S", "size"))
    full = pd.MultiIndex.from_product([range(iters), range(ranks)])
    g = agg.reindex(full, fill_value=0).to_numpy(float).reshape(iters, ranks, 3)
    return g, 1e3 * secs.to_numpy().max(axis=1)


@dataclass(frozen=True)
class FittedRankCost:
    """LoongForge: packs reordered across ranks on x*L^2 + y*L + z (module docstring)."""

    m_mem: float
    x: float = 0.0
    y: float = 1.0
    z: float = 0.0
    micro_batches: int = MICRO_BATCHES
    name: str = "loongforge"

    def __post_init__(self) -> None:
        if min(self.x, self.y, self.z) < 0 or self.x + self.y + self.z <= 0:
            raise ValueError(f"x, y, z must be >= 0 and not all 0, got {(self.x, self.y, self.z)}")

    @classmethod
    def fit(cls, cost, buckets, m_mem: float, **warmup) -> FittedRankCost:
        """x, y, z fitted on warm-up iterations (warmup_groups's keywords); a fit of all zeros
        (nothing to balance) keeps LoongForge's starting 0, 1, 0."""
        x, y, z = fit_rank_cost(*warmup_groups(cost, buckets, m_mem, **warmup))
        return cls(float(m_mem), x, y, z) if x + y + z > 0 else cls(float(m_mem))

    def sample_cost(self, S) -> np.ndarray:
        S = np.asarray(S, float)
        return self.x * S**2 + self.y * S + self.z

    def epoch_plan(self, tokens, world: int, seed: int, epoch: int) -> Plan:
        tokens = np.asarray(tokens, np.int64)
        if tokens.max() > self.m_mem:
            raise ValueError(f"a sample of {tokens.max()} tokens exceeds M_mem = {self.m_mem:.0f}")
        order = np.random.default_rng([seed, epoch]).permutation(len(tokens))
        t = tokens[order]
        step, micro, src = pack_source(t, self.m_mem, world, self.micro_batches)
        rank = rebalance_packs(self.sample_cost, t, step, micro, src, world)
        return Plan.from_assignment(
            world, int(step[-1]) + 1, order, step, rank, tokens, self.m_mem, self.name
        )
