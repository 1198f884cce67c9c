"""Coordinated global balancing (issue 7): each step's samples are partitioned across all ranks.

Every rank knows the step's candidate samples and their predicted costs (the sampler's seeded order
is identical on every rank, so no extra communication is needed) and runs the same deterministic
planner:
1. cost of a sample = b * S^p + a * S / M_mem (its variable cost plus its share of the per-micro-
   batch fixed cost a);
2. bounded deferral: a sample whose cost alone exceeds `defer_above` x the target rank load
   (total / R) waits for the next step, at most `max_defer` steps (then it runs regardless);
3. LPT by rounds: samples sorted by cost, descending; each round of R samples goes largest-first to
   the currently least-loaded ranks (vectorised: one argsort of R loads per round);
4. each rank runs its samples as model batches of one sequence length of at most M_mem tokens,
   longest first, with gradient accumulation, so ranks may run different numbers of batches. The
   loss is weighted by batch tokens / the step's global tokens (`loss_weights`) so the gradient
   equals standard data parallelism's.
The epoch's plan is a suite.balance.plan.Plan; `epoch_plan` loops over steps only (the stream is
read through a window, the regrouping into batches is one vectorised pass): about 1-3 ms per
1024-rank step on one core.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

import numpy as np


def lpt_partition(costs: np.ndarray, ranks: int) -> tuple[np.ndarray, np.ndarray]:
    """(rank of each item, load of each rank) by LPT in rounds of `ranks` items."""
    costs = np.asarray(costs, float)
    order = np.argsort(-costs, kind="stable")
    c = costs[order]
    owner = np.empty(len(c), np.int64)
    loads = np.zeros(ranks)
    for j in range(0, len(c), ranks):
        chunk = c[j : j + ranks]
        target = np.argsort(loads, kind="stable")[: len(chunk)]  # least loaded first
        loads[target] += chunk
        owner[order[j : j + ranks]] = target
    return owner, loads


def kk_partition(costs: np.ndarray, ranks: int) -> tuple[np.ndarray, np.ndarray]:
    """(rank of each item, load of each rank) by Karmarkar-Karp largest differencing.

    Better than LPT with few items per rank, but O(n R log n): use it for small R.
    """
    costs = np.asarray(costs, float)
    heap = []
    for i, c in enumerate(costs):
        sums = np.zeros(ranks)
        sums[-1] = c
        members = [[] for _ in range(ranks)]
        members[-1] = [i]
        heap.append((-c, i, sums, members))
    heapq.heapify(heap)
    tie = len(costs)
    while len(heap) > 1:
        _, _, s1, m1 = heapq.heappop(heap)
        _, _, s2, m2 = heapq.heappop(heap)
        s = s1 + s2[::-1]  # the largest sums of one meet the smallest of the other
        m = [x + y for x, y in zip(m1, m2[::-1])]
        order = np.argsort(s, kind="stable")
        s, m = s[order], [m[j] for j in order]
        heapq.heappush(heap, (-(s[-1] - s[0]), tie, s, m))
        tie += 1
    owner = np.zeros(len(costs), np.int64)
    loads = np.zeros(ranks)
    if heap:
        _, _, loads, members = heap[0]
        for r, items in enumerate(members):
            owner[items] = r
    return owner, np.asarray(loads, float)


PARTITIONERS = {"lpt": lpt_partition, "kk": kk_partition}


def loss_weights(sample_tokens, global_tokens: float) -> np.ndarray:
    """Per-sample loss weights tokens_i / global tokens: summed over every rank's micro-batches (and
    all-reduced with SUM) the gradient equals the token-weighted mean over the whole global batch."""
    return np.asarray(sample_tokens, float) / float(global_tokens)


@dataclass(frozen=True)
class StepAssignment:
    owner: np.ndarray  # rank of each executed sample
    run: np.ndarray  # indices (into the candidates) executed this step
    deferred: np.ndarray  # indices deferred to the next step
    loads: np.ndarray  # predicted load per rank


def deferrable(
    cost: np.ndarray, age: np.ndarray, target: float, max_defer: int, defer_above: float
) -> np.ndarray:
    """Samples heavier alone than `defer_above` x the target rank load that may still wait."""
    return (cost > defer_above * target) & (age < max_defer)


def plan_step(
    S: np.ndarray,
    age: np.ndarray,
    ranks: int,
    a: float,
    b: float,
    p: float,
    m_mem: float,
    max_defer: int = 1,
    defer_above: float = 1.0,
    target: float | None = None,
    method: str = "lpt",
    costs: np.ndarray | None = None,
) -> StepAssignment:
    """The planner for one step: bounded deferral, then LPT over `ranks`.

    target is the intended rank load (default: the candidates' total cost / ranks); `costs`, if
    given, are the candidates' costs b * S^p + a * S / m_mem already computed.
    """
    if costs is None:
        S = np.asarray(S, float)
        cost = b * S**p + a * S / m_mem
    else:
        cost = np.asarray(costs, float)
    target = cost.sum() / ranks if target is None else target
    defer = deferrable(cost, age, target, max_defer, defer_above)
    if defer.all():  # never leave a step empty
        defer[:] = False
    run = np.flatnonzero(~defer)
    if method not in PARTITIONERS:
        raise ValueError(f"unknown partition method {method!r}; accepted: {sorted(PARTITIONERS)}")
    owner, loads = PARTITIONERS[method](cost[run], ranks)
    return StepAssignment(owner, run, np.flatnonzero(defer), loads)


@dataclass(frozen=True)
class GlobalPolicy:
    """Per-step coordinated LPT assignment under a per-model-batch token cap M_mem."""

    m_mem: float
    # the power law a + b*B*S^p the planner predicts with (fixed_s, b, p: a user's fitted
    # CostModel); the simulated or measured steps may follow another model
    planner: object | None = None
    samples_per_rank: float | None = None  # candidates per rank per step; default M_mem / mean S
    max_defer: int = 1
    defer_above: float = 1.0
    planner_error: float = 1.0  # planner's b = the fitted b x this (to study miscalibration)
    method: str = "lpt"  # "lpt" (vectorised rounds) or "kk" (Karmarkar-Karp, small R)
    name: str = "global"

    def epoch_plan(self, tokens, world: int, seed: int, epoch: int):
        """One epoch as a Plan (suite.balance.plan): the epoch's shuffled stream, seeded by
        (seed, epoch), cut into steps of equal predicted cost, each planned by `plan_step`
        (deferred samples go to the front of the next step, none past the epoch's end); each
        rank's samples then run as model batches of one length of <= M_mem tokens, longest
        first, weight = tokens / the step's global tokens (Plan.from_assignment)."""
        from suite.balance.plan import Plan

        if self.planner is None:
            raise ValueError("GlobalPolicy.epoch_plan needs planner= (a fitted cost model)")
        tokens = np.asarray(tokens, np.int64)
        if tokens.max() > self.m_mem:
            raise ValueError(
                f"a sample of {tokens.max()} tokens exceeds the model-batch cap "
                f"M_mem = {self.m_mem:.0f}; raise M_mem or split sequences"
            )
        R, N = world, len(tokens)
        a, p = float(self.planner.fixed_s), float(self.planner.p)
        b = float(self.planner.b) * self.planner_error

        cost_of = b * tokens.astype(float) ** p + a * tokens / self.m_mem  # planner's, per sample
        n = max(1, int(round((self.samples_per_rank or self.m_mem / tokens.mean()) * R)))
        perm = np.random.default_rng([seed, epoch]).permutation(N)
        budget = n * float(cost_of.mean())
        none = np.zeros(0, np.int64)
        front, front_age, ptr = none, none, 0  # deferred samples wait at the queue's front
        out_s, out_r, out_k = [], [], []
        while ptr < N or len(front):
            w = 2 * n  # look at a window of the stream, not all of it (O(N) per step)
            while True:
                cand = np.concatenate([front, perm[ptr : ptr + w]])
                age = np.concatenate([front_age, np.zeros(len(cand) - len(front), np.int64)])
                c = cost_of[cand]
                c[deferrable(c, age, budget / R, self.max_defer, self.defer_above)] = 0
                take = int(np.searchsorted(np.cumsum(c), budget)) + 1
                if take <= len(cand) or ptr + w >= N:
                    break
                w *= 2
            take = min(take, len(cand))
            if take == len(cand) and ptr + w >= N:  # the epoch's last step: no deferral
                age[:] = self.max_defer
            idx, a_idx = cand[:take], age[:take]
            pl = plan_step(
                tokens[idx], a_idx, R, a, b, p, self.m_mem, self.max_defer, self.defer_above,
                target=budget / R, method=self.method, costs=cost_of[idx],
            )  # fmt: skip
            out_s.append(idx[pl.run])
            out_r.append(pl.owner)
            out_k.append(np.full(len(pl.run), len(out_k), np.int64))
            ptr += max(0, take - len(front))
            front, front_age = (
                np.concatenate([idx[pl.deferred], front[take:]]),
                np.concatenate([a_idx[pl.deferred] + 1, front_age[take:]]),
            )
        return Plan.from_assignment(
            R,
            len(out_k),
            np.concatenate(out_s),
            np.concatenate(out_k),
            np.concatenate(out_r),
            tokens,
            self.m_mem,
            self.name,
        )


def time_planner(ranks: int = 1024, repeats: int = 50, seed: int = 0) -> float:
    """Median milliseconds of one planning step for `ranks` ranks on the default mix (one core)."""
    from suite.balance.costmodel import default_cost_model
    from suite.data.corpus import sample_corpus

    cost = default_cost_model()
    S_all = sample_corpus(200_000, seed=seed)["tokens"].to_numpy()
    n = int(round(cost.m_mem / S_all.mean() * ranks))
    rng = np.random.default_rng(seed)
    times = []
    for _ in range(repeats):
        S = rng.choice(S_all, n)
        t0 = time.perf_counter()
        plan_step(S, np.zeros(n, np.int64), ranks, cost.a, cost.b, cost.p, cost.m_mem)
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def __getattr__(name: str):  # the sampler's old home: suite.balance.sampler has it now
    if name == "GlobalBatchSampler":
        from suite.balance.sampler import GlobalBatchSampler

        return GlobalBatchSampler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
