"""Two DiT-era balancers as Plan policies: KnapFormer's compute bags and LoongForge's fitted rank cost.

Built from the papers' and projects' descriptions, not their code.

- KnapFormer (Zhang et al., Adobe, arXiv 2508.06001, github.com/Kai-46/KnapFormer): every rank of
  a balancing group gathers the sequence lengths of the group's local batches, a global knapsack
  solver assigns the sequences to "compute bags" (one or more GPUs; Ulysses sequence parallelism
  inside a bag) so that the per-GPU workload is equal, and one all-to-all moves them. Per-sequence
  workload 24*S*d^2 + gamma*4*S^2*d (linear layers plus attention FLOPs of width d), gamma fitted
  by least squares to a measured length sweep; assignment greedy, largest first, into the bag of
  least load (the paper reports < 1% per-GPU workload difference). `KnapFormerBags`.
- LoongForge (Baidu Baige, baidu-baige.github.io/LoongForge, "DP load balancing"): fixed-length
  packing equalises tokens per data-parallel rank but not compute; LoongForge models a rank's
  step time as x*sum(L^2) + y*sum(L) + z*count over its samples, fits x, y, z from warm-up
  iterations, and reorders the global batch's samples across DP ranks to balance that model.
  `FittedRankCost`.

Choices that are ours (the suite's setting, stated):
- One bag per rank: every sample here fits one GPU (S <= M_mem), so KnapFormer's multi-GPU bags
  and sequence parallelism do not arise; the bag is the rank.
- The step's global batch: the epoch's shuffled stream (seeded by (seed, epoch)) cut into steps of
  at most world * M_mem tokens (each rank's data loader delivering up to M_mem tokens, as
  equal-token's batches do); the balancer reassigns those samples, and each rank's share is
  packed into model batches of one length under M_mem (Plan.from_assignment), loss weight =
  tokens / the step's tokens.
- Both assign greedily, largest first, to the least-loaded rank (exact LPT, a heap; LoongForge's
  docs do not name its reordering algorithm, so it gets the same one): the two differ in the cost
  they balance.
- KnapFormer's gamma: fitted to the suite's measured shape-sweep cost (the CostModel's step model:
  its quadratic form where it has one, else the power law) taken as the per-sample time at the
  data's distinct lengths (the step model's sample_cost: the fixed per-batch part left out), by
  non-negative least squares on relative residuals (each length counts alike) of
  kappa*24*S*d^2 + kappa*gamma*4*S^2*d. d = 5120 (Wan-14B); d only rescales the reported gamma,
  the plan depends on gamma/d. With one distinct length gamma cannot be fitted: 1 (FLOPs as counted).
- LoongForge's warm-up: WARMUP_STEPS steps on WARMUP_RANKS ranks of fixed-length packing (each
  rank the next samples of the stream up to M_mem tokens) on a corpus drawn from the data's
  bucket table; each rank-step's seconds are what the simulator charges without noise (the step
  model above: one model batch per distinct length, cost.predict(B, S)); x, y, z by non-negative
  least squares of those seconds on (sum L^2, sum L, count).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from suite.balance.peers import lengths_of
from suite.balance.plan import Plan

WIDTH = 5120  # Wan-14B's model width d
WARMUP_STEPS = 20
WARMUP_RANKS = 8


# ----------------------------------------------------------------------------- shared pieces


def step_windows(tokens_in_order, budget: float) -> np.ndarray:
    """Boundaries (len steps + 1) cutting a stream of token counts into consecutive windows of at
    most `budget` tokens (a sample over the budget alone makes its own window)."""
    t = np.asarray(tokens_in_order, np.int64)
    cum = np.concatenate([[0], np.cumsum(t)])
    bounds, start = [0], 0
    while start < len(t):
        end = int(np.searchsorted(cum, cum[start] + budget * (1 + 1e-12), side="right")) - 1
        start = max(end, start + 1)
        bounds.append(start)
    return np.asarray(bounds, np.int64)


def greedy_bags(costs, bags: int) -> tuple[np.ndarray, np.ndarray]:
    """(bag of each item, load of each bag): items largest first, each into the bag of least
    load (ties: the lower bag). Exact LPT: a heap of (load, bag)."""
    costs = np.asarray(costs, float)
    owner = np.empty(len(costs), np.int64)
    heap = [(0.0, b) for b in range(bags)]
    for i in np.argsort(-costs, kind="stable"):
        load, b = heap[0]
        owner[i] = b
        heapq.heapreplace(heap, (load + costs[i], b))
    loads = np.bincount(owner, weights=costs, minlength=bags).astype(float)
    return owner, loads


def per_sample_seconds(cost, S) -> np.ndarray:
    """The measured cost's per-sample time at lengths S: its step model's variable part."""
    model = cost.step_model() if hasattr(cost, "step_model") else cost
    S = np.asarray(S, float)
    if hasattr(model, "sample_cost"):
        return np.asarray(model.sample_cost(S), float)
    return np.asarray(model.predict(1, S), float) - float(model.fixed_s)


@dataclass(frozen=True)
class _RebalancedSteps:
    """Per step: the stream's next world * M_mem tokens, reassigned across ranks by greedy_bags on
    `sample_cost`, each rank's share packed under M_mem (module docstring)."""

    m_mem: float

    def sample_cost(self, S) -> np.ndarray:
        raise NotImplementedError

    def epoch_plan(self, tokens, world: int, seed: int, epoch: int) -> Plan:
        tokens = np.asarray(tokens, np.int64)
        if tokens.max() > self.m_mem:
            raise ValueError(f"a sample of {tokens.max()} tokens exceeds M_mem = {self.m_mem:.0f}")
        order = np.random.default_rng([seed, epoch]).permutation(len(tokens))
        bounds = step_windows(tokens[order], world * self.m_mem)
        cost = self.sample_cost(tokens[order])
        rank = np.empty(len(order), np.int64)
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            rank[lo:hi] = greedy_bags(cost[lo:hi], world)[0]
        step = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
        return Plan.from_assignment(
            world, len(bounds) - 1, order, step, rank, tokens, self.m_mem, self.name
        )


# ----------------------------------------------------------------------------- KnapFormer


def fit_gamma(S, seconds, width: int = WIDTH) -> float:
    """KnapFormer's gamma: non-negative least squares of seconds on kappa*24*S*d^2 +
    kappa*gamma*4*S^2*d, residuals relative to seconds (1.0 where it cannot be fitted)."""
    S, t = np.asarray(S, float), np.asarray(seconds, float)
    ok = t > 0
    if np.unique(S[ok]).size < 2:
        return 1.0
    d = float(width)
    X = np.column_stack([24 * S * d**2, 4 * S**2 * d])[ok] / t[ok, None]
    scale = X.max(axis=0)
    (k_lin, k_att), _ = nnls(X / scale, np.ones(ok.sum()))
    k_lin, k_att = k_lin / scale[0], k_att / scale[1]
    return float(k_att / k_lin) if k_lin > 0 else float("inf")


@dataclass(frozen=True)
class KnapFormerBags(_RebalancedSteps):
    """KnapFormer: per-rank compute bags filled greedily on 24*S*d^2 + gamma*4*S^2*d."""

    gamma: float = 1.0
    width: int = WIDTH
    name: str = "knapformer"

    def __post_init__(self) -> None:
        if not 0 <= self.gamma < np.inf:
            raise ValueError(f"gamma must be a finite number >= 0, got {self.gamma}")

    @classmethod
    def fit(cls, cost, buckets, m_mem: float, width: int = WIDTH) -> KnapFormerBags:
        """gamma fitted to the cost's per-sample time at the data's lengths (module docstring)."""
        S = lengths_of(buckets)
        gamma = fit_gamma(S, per_sample_seconds(cost, S), width)
        return cls(float(m_mem), gamma if np.isfinite(gamma) else 1.0, width)

    def sample_cost(self, S) -> np.ndarray:
        S, d = np.asarray(S, float), float(self.width)
        return 24 * S * d**2 + self.gamma * 4 * S**2 * d


# ----------------------------------------------------------------------------- LoongForge


def fit_rank_cost(sum_sq, sum_len, count, seconds) -> tuple[float, float, float]:
    """(x, y, z) >= 0 of seconds ~ x*sum(L^2) + y*sum(L) + z*count, least squares (columns
    scaled to one before the solve, so the lengths' magnitudes do not condition it)."""
    X = np.column_stack([sum_sq, sum_len, count]).astype(float)
    t = np.asarray(seconds, float)
    if len(t) < 3:
        raise ValueError(f"fit_rank_cost needs at least 3 rank-steps, got {len(t)}")
    scale = np.where(X.max(axis=0) > 0, X.max(axis=0), 1.0)
    coef, _ = nnls(X / scale, t)
    x, y, z = coef / scale
    return float(x), float(y), float(z)


def warmup_rank_steps(
    cost, buckets, m_mem: float, steps: int = WARMUP_STEPS, ranks: int = WARMUP_RANKS, seed=0
) -> pd.DataFrame:
    """Warm-up rank-steps of fixed-length packing on a corpus drawn from the bucket table (S,
    share) (module docstring): one row per rank-step with sum_sq, sum_len, count and seconds (the
    step model, one model batch per distinct length)."""
    if not isinstance(buckets, pd.DataFrame) or not {"S", "share"} <= set(buckets.columns):
        raise ValueError("warmup_rank_steps needs a bucket table with columns S and share")
    share = buckets.groupby("S")["share"].sum()
    S, share = share.index.to_numpy(np.int64), share.to_numpy(float)
    rng = np.random.default_rng([seed, 0x10F])
    n = int(4 * steps * ranks * m_mem / float(np.dot(share / share.sum(), S))) + 16
    stream = rng.choice(S, size=n, p=share / share.sum())
    bounds = step_windows(stream, m_mem)[: steps * ranks + 1]
    rs = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
    d = pd.DataFrame({"rs": rs, "S": stream[: bounds[-1]]})
    model = cost.step_model() if hasattr(cost, "step_model") else cost
    mb = d.groupby(["rs", "S"]).size().rename("B").reset_index()
    mb["seconds"] = np.asarray(model.predict(mb["B"].to_numpy(), mb["S"].to_numpy()), float)
    d["sq"] = d["S"].astype(float) ** 2
    out = d.groupby("rs").agg(sum_sq=("sq", "sum"), sum_len=("S", "sum"), count=("S", "size"))
    out["seconds"] = mb.groupby("rs")["seconds"].sum()
    return out.reset_index(drop=True)


@dataclass(frozen=True)
class FittedRankCost(_RebalancedSteps):
    """LoongForge: samples reordered across ranks to balance x*sum(L^2) + y*sum(L) + z*count."""

    x: float = 1.0
    y: float = 0.0
    z: float = 0.0
    name: str = "loongforge"

    def __post_init__(self) -> None:
        if min(self.x, self.y, self.z) < 0 or self.x + self.y + self.z <= 0:
            raise ValueError(f"x, y, z must be >= 0 and not all 0, got {(self.x, self.y, self.z)}")

    @classmethod
    def fit(cls, cost, buckets, m_mem: float, **warmup) -> FittedRankCost:
        """x, y, z fitted on warm-up rank-steps (warmup_rank_steps's keywords)."""
        w = warmup_rank_steps(cost, buckets, m_mem, **warmup)
        x, y, z = fit_rank_cost(w["sum_sq"], w["sum_len"], w["count"], w["seconds"])
        if x + y + z <= 0:  # a degenerate warm-up: balance the attention term alone
            x = 1.0
        return cls(float(m_mem), x, y, z)

    def sample_cost(self, S) -> np.ndarray:
        S = np.asarray(S, float)
        return self.x * S**2 + self.y * S + self.z
