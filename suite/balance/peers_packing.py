"""Cost-aware packing as verl, slime and Megatron-LM ship it, as a Plan policy.

Each step takes a budget of samples from the epoch's shuffled stream (as GlobalPolicy does: about
M_mem tokens per rank, cut at equal predicted cost), partitions them across ranks by a per-sample
cost, and regroups each rank's share into model batches of one length of <= M_mem tokens
(Plan.from_assignment), loss weight = tokens / the step's global tokens.

Sources (the projects' code, read for this; the code here is ours):
- verl `verl/utils/seqlen_balancing.py`: `karmarkar_karp` (largest differencing over k-way
  partial partitions) balances ranks and micro-batches; `calculate_workload` prices a sample
  24576 * L + L^2 (12 h^2 L + 2 h L^2 of a 7B model, h = 4096); `balance_batch` in
  `verl/trainer/ppo/ray_trainer.py` splits a batch across DP ranks with equal_size=True (every
  rank the same number of samples; `kk_equal_partition`).
- slime `slime/utils/dp_schedule.py`, `--balance-by-flops` (`slime/utils/arguments.py`): the
  workload coeff * L + L^2 with coeff from the model config, partitioned by Karmarkar-Karp; slime
  warns the FLOPs partition may exceed --max-tokens-per-gpu. Here the token cap always holds: the
  partition picks each rank's samples, the cap is applied when packing them.
- Megatron-LM `megatron/core/pipeline_parallel/hybrid_cp_schedule.py` (`BalancedCPScheduler.
  next_hdp_group`): samples in descending cost go to the least-loaded GPU; `trim_overload` then
  repeatedly removes the most recently added sample of the most-loaded GPU to the leftovers (the
  next group) while that lowers max - min, and stops once max - min <= delta * max (delta =
  0.05). Without context parallelism (every sample fits one rank, as here) the CP-size switches
  that gate its early exit never happen, so the group is greedy LPT plus that trim. Here a
  trimmed sample is deferred once at most (then pinned), and the epoch's last step trims nothing.

Variants (PACKING_VARIANTS) are named after what they do: the cost (flops: c*L + L^2; fitted: the
cost model's b*S^p plus its per-batch fixed cost spread over M_mem tokens, as GlobalPolicy) and
the partitioner (kk: global_policy.kk_partition, verl's KK, ~0.1 s for 40,000 items on 1,024
ranks; kkeq: verl's equal-size KK, n / R states of R items; lpt: global_policy's vectorised
rounds; trim-5pct: LPT then Megatron's 5% trim).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from suite.balance.global_policy import PARTITIONERS, lpt_partition
from suite.balance.plan import Plan

COST_FORMS = ("flops", "fitted")


def flops_linear_coef(cost) -> float:
    """slime's coeff in coeff*L + L^2: the linear / quadratic FLOPs per token of the model. From
    the cost model's quadratic fit (b / d) where it has one, else the analytic Wan-14B widths the
    default cost model is fitted to (costmodel.WAN14B_FLOPS: 84e9 / 3.5e6 = 24000, near verl's
    24576 for a 7B model)."""
    q = getattr(cost, "quadratic", None)
    if q and q.get("d"):
        return float(q["b"]) / float(q["d"])
    from suite.balance.costmodel import WAN14B_FLOPS

    return WAN14B_FLOPS[0] / WAN14B_FLOPS[1]


def kk_equal_partition(costs, ranks: int) -> tuple[np.ndarray, np.ndarray]:
    """(rank of each item, load of each rank) by verl's karmarkar_karp(equal_size=True): the
    sorted costs cut into chunks of `ranks` items, one per partition, each chunk a state; the two
    states of largest spread (max - min) are merged, the largest sums of one meeting the smallest
    of the other, until one is left. Every rank gets ceil or floor of n / ranks items (the last
    chunk is padded with zero-cost items, dropped after)."""
    costs = np.asarray(costs, float)
    n = len(costs)
    c = np.concatenate([costs, np.zeros(-n % ranks)])
    order = np.argsort(c, kind="stable")
    heap, tie = [], 0
    for start in range(0, len(c), ranks):
        idx = order[start : start + ranks]  # ascending: sums sorted, members one column
        heap.append((-(c[idx[-1]] - c[idx[0]]), tie, c[idx], idx[:, None]))
        tie += 1
    heapq.heapify(heap)
    while len(heap) > 1:
        _, _, s1, m1 = heapq.heappop(heap)
        _, _, s2, m2 = heapq.heappop(heap)
        s, m = s1 + s2[::-1], np.concatenate([m1, m2[::-1]], axis=1)
        o = np.argsort(s, kind="stable")
        heapq.heappush(heap, (-(s[o[-1]] - s[o[0]]), tie, s[o], m[o]))
        tie += 1
    owner = np.zeros(len(c), np.int64)
    loads = np.zeros(ranks)
    if heap:
        _, _, loads, members = heap[0]
        owner[members] = np.arange(ranks)[:, None]
    return owner[:n], np.asarray(loads, float)


PARTITION = {**PARTITIONERS, "kkeq": kk_equal_partition}


def trim_overload(costs, owner, loads, pinned, stop_slack: float) -> tuple[np.ndarray, bool]:
    """Megatron's trim_overload on one step: while max - min > stop_slack * max and no rank is
    empty, take the most-loaded rank's most recent (under LPT: its cheapest) unpinned item; move
    it out if that lowers max - min, else stop. Returns (kept mask, converged) and updates
    owner/loads in place; converged means max - min <= stop_slack * max at the end."""
    keep = np.ones(len(costs), bool)
    while True:
        top, low = loads.max(), loads.min()
        if top - low <= stop_slack * top:
            return keep, True
        r = int(np.argmax(loads))
        mine = np.flatnonzero(keep & (owner == r))
        free = mine[~pinned[mine]]
        if low == 0 or len(mine) <= 1 or len(free) == 0:
            return keep, False
        j = free[np.argmin(costs[free])]
        trial = loads.copy()
        trial[r] -= costs[j]
        if trial.max() - trial.min() >= top - low:
            return keep, False
        keep[j], loads[r] = False, trial[r]


@dataclass(frozen=True)
class PackedStep:
    samples: np.ndarray  # the step's sample indices, in queue order
    owner: np.ndarray  # the rank of each
    loads: np.ndarray  # per rank: summed partition cost
    converged: bool  # the stop rule held (always True without one)

    @property
    def ranks(self) -> list[np.ndarray]:
        """Per rank: its sample indices, in queue order."""
        by_rank = np.argsort(self.owner, kind="stable")
        cuts = np.cumsum(np.bincount(self.owner, minlength=len(self.loads)))[:-1]
        return np.split(self.samples[by_rank], cuts)


@dataclass(frozen=True)
class CostAwarePacking:
    """Per step: a sample budget, partitioned across ranks by cost, packed under M_mem."""

    m_mem: float
    a: float  # the cost model's per-batch fixed time (fitted form)
    b: float  # its b in b * S^p (fitted form)
    p: float
    linear_coef: float | None = None  # set: the flops form c*L + L^2; None: the fitted form
    method: str = "kk"
    stop_slack: float | None = None  # Megatron: trim until max - min <= stop_slack * max
    samples_per_rank: float | None = None  # default M_mem / mean S
    name: str = "pack-kk-fitted"

    @classmethod
    def make(cls, cost, m_mem: float, cost_form: str = "fitted", **kw) -> CostAwarePacking:
        """From a power-law CostModel (a + b*B*S^p: its fixed_s, b, p), as GlobalPolicy plans."""
        if cost_form not in COST_FORMS:
            raise ValueError(f"cost_form must be one of {COST_FORMS}, got {cost_form!r}")
        if not all(hasattr(cost, k) for k in ("fixed_s", "b", "p")):
            raise ValueError(
                f"cost must be a power-law CostModel (fixed_s, b, p), got {type(cost).__name__}"
            )
        coef = flops_linear_coef(cost) if cost_form == "flops" else None
        return cls(float(m_mem), float(cost.fixed_s), float(cost.b), float(cost.p), coef, **kw)

    def __post_init__(self) -> None:
        if self.method not in PARTITION:
            raise ValueError(f"method must be one of {sorted(PARTITION)}, got {self.method!r}")

    def sample_cost(self, S) -> np.ndarray:
        S = np.asarray(S, float)
        if self.linear_coef is not None:
            return self.linear_coef * S + S**2
        return self.b * S**self.p + self.a * S / self.m_mem

    def epoch_steps(self, tokens, world: int, seed: int, epoch: int) -> list[PackedStep]:
        """The epoch's steps: each rank's samples, its partition load, the stop rule's verdict."""
        tokens = np.asarray(tokens, np.int64)
        if tokens.max() > self.m_mem:
            raise ValueError(f"a sample of {tokens.max()} tokens exceeds M_mem = {self.m_mem:.0f}")
        per_rank = self.samples_per_rank or self.m_mem / tokens.mean()
        cost = self.sample_cost(tokens)  # once per epoch: a step prices only its window
        budget = max(1, round(per_rank * world)) * float(cost.mean())
        stream = np.random.default_rng([seed, epoch]).permutation(len(tokens))
        window = max(64, 4 * round(per_rank * world))  # grows where a step needs more
        # the queue is `front` (deferred once: pinned, may not be trimmed again) + stream[pos:]
        front, pos = np.zeros(0, np.int64), 0
        partition = PARTITION[self.method] if self.stop_slack is None else lpt_partition
        steps = []
        while len(front) or pos < len(stream):
            while True:
                q = np.concatenate([front, stream[pos : pos + window]])
                cum = np.cumsum(cost[q])
                take = int(np.searchsorted(cum, budget)) + 1
                if take <= len(q) or pos + window >= len(stream):
                    break
                window *= 2
            left = len(front) + len(stream) - pos  # samples still queued
            take = min(take, len(q))
            idx, c = q[:take], cost[q[:take]]
            pin = np.arange(take) < len(front)
            owner, loads = partition(c, world)
            keep, converged = np.ones(take, bool), True
            if self.stop_slack is not None:
                if take < left:
                    keep, converged = trim_overload(c, owner, loads, pin, self.stop_slack)
                else:  # the epoch's last step defers nothing
                    converged = bool(loads.max() - loads.min() <= self.stop_slack * loads.max())
            steps.append(PackedStep(idx[keep], owner[keep], loads, converged))
            pos += max(0, take - len(front))
            front = np.concatenate([idx[~keep], front[take:]])
        return steps

    def epoch_plan(self, tokens, world: int, seed: int, epoch: int) -> Plan:
        tokens = np.asarray(tokens, np.int64)
        steps = self.epoch_steps(tokens, world, seed, epoch)
        none = np.zeros(0, np.int64)
        cat = (lambda parts: np.concatenate(parts).astype(np.int64)) if steps else lambda _: none
        return Plan.from_assignment(
            world,
            len(steps),
            cat([st.samples for st in steps]),
            cat([np.full(len(st.samples), k) for k, st in enumerate(steps)]),
            cat([st.owner for st in steps]),
            tokens,
            self.m_mem,
            self.name,
        )


# name -> CostAwarePacking.make keywords (suite.balance.registry builds them)
PACKING_VARIANTS: dict[str, dict] = {
    "pack-kk-flops": {"cost_form": "flops", "method": "kk"},
    "pack-kkeq-flops": {"cost_form": "flops", "method": "kkeq"},
    "pack-lpt-flops": {"cost_form": "flops", "method": "lpt"},
    "pack-kk-fitted": {"cost_form": "fitted", "method": "kk"},
    "pack-lpt-fitted": {"cost_form": "fitted", "method": "lpt"},
    "pack-trim-5pct": {"cost_form": "fitted", "method": "lpt", "stop_slack": 0.05},
}
