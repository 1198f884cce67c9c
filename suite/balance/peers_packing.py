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
  get_groups_and_subsamples`, `next_hdp_group`): one global batch's samples, sorted by length
  (descending), are scheduled in groups; a group gives each sample to the least-loaded GPU, then
  `trim_overload` removes the most recently added sample of the most-loaded GPU to the leftovers
  while that lowers max - min, until max - min <= delta * max (delta = 0.05); the leftovers form
  the next group of the same step, in trim order. Workload L^2 (`get_total_workload`, CP size 1).
  Without context parallelism (every sample fits one rank, as here) the CP-size switches that
  gate its early exit never happen. `megatron_groups`.

Deviations, deliberate (tests/test_peer_oracles.py shows each):
- A step here has one synchronisation, at its end: Megatron's barrier between groups is not
  modelled (a Plan holds no barriers inside a step), so a rank's step load is its groups' sum.
- A last group with fewer samples than GPUs leaves GPUs idle; Megatron's fill_empty_gpus splits
  a sample across them by context parallelism, which the suite does not run.
- verl's equal_size=True asserts n % ranks == 0; kkeq pads with zero-cost items instead.
- verl's KK labels ranks by decreasing sum and orders equal sums by set size and item indices;
  the loads are the same (tests compare the load vectors and the partitions as sets of costs).

Variants (PACKING_VARIANTS) are named after what they do: the cost (flops: c*L + L^2; fitted: the
cost model's b*S^p plus its per-batch fixed cost spread over M_mem tokens, as GlobalPolicy;
square: Megatron's L^2) and the partitioner (kk: global_policy.kk_partition, verl's KK, ~0.1 s
for 40,000 items on 1,024 ranks; kkeq: verl's equal-size KK, n / R states of R items; lpt:
global_policy.greedy_partition, LPT item by item as Megatron runs it; trim-5pct: Megatron's
groups with the 5% trim, on L^2).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from suite.balance.global_policy import PARTITIONERS, greedy_partition
from suite.balance.plan import Plan

COST_FORMS = ("flops", "fitted", "square")


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
    chunk is padded with zero-cost items, dropped after). Ties as verl's: the larger spread, then
    the larger largest sum, pops first."""
    costs = np.asarray(costs, float)
    n = len(costs)
    c = np.concatenate([costs, np.zeros(-n % ranks)])
    order = np.argsort(c, kind="stable")
    heap, tie = [], 0
    for start in range(0, len(c), ranks):
        idx = order[start : start + ranks]  # ascending: sums sorted, members one column
        heap.append((-(c[idx[-1]] - c[idx[0]]), -c[idx[-1]], tie, c[idx], idx[:, None]))
        tie += 1
    heapq.heapify(heap)
    while len(heap) > 1:
        *_, s1, m1 = heapq.heappop(heap)
        *_, s2, m2 = heapq.heappop(heap)
        s, m = s1 + s2[::-1], np.concatenate([m1, m2[::-1]], axis=1)
        o = np.argsort(s, kind="stable")
        heapq.heappush(heap, (-(s[o[-1]] - s[o[0]]), -s[o[-1]], tie, s[o], m[o]))
        tie += 1
    owner = np.zeros(len(c), np.int64)
    loads = np.zeros(ranks)
    if heap:
        *_, loads, members = heap[0]
        owner[members] = np.arange(ranks)[:, None]
    return owner[:n], np.asarray(loads, float)


PARTITION = {**PARTITIONERS, "kkeq": kk_equal_partition}


def trim_overload(costs, owner, loads, members: list[list[int]], stop_slack: float) -> list[int]:
    """Megatron's trim_overload on one group: while max - min > stop_slack * max and no rank is
    empty, take the most recently added item of the most-loaded rank (the first such rank); move
    it out if that lowers max - min, else stop. Updates owner (-1: trimmed), loads and `members`
    (per rank, its items in assignment order) in place; returns the trimmed items in trim order."""
    out = []
    while True:
        top, low = loads.max(), loads.min()
        if top - low <= stop_slack * top or low == 0:
            return out
        r = int(np.argmax(loads))
        if len(members[r]) <= 1:
            return out
        j = members[r][-1]
        trial = loads.copy()
        trial[r] -= costs[j]
        if not trial.max() - trial.min() < top - low:
            return out
        members[r].pop()
        owner[j], loads[r] = -1, loads[r] - costs[j]
        out.append(j)


def megatron_groups(costs, ranks: int, stop_slack: float) -> tuple[np.ndarray, np.ndarray, bool]:
    """(rank of each item, its group, every group within the slack) as Megatron-LM's
    BalancedCPScheduler.get_groups_and_subsamples schedules one global batch when every sample
    fits one rank: the items sorted largest first; a group assigns them in that order each to the
    least-loaded rank (greedy_partition), then trim_overload moves items out to the next group,
    which takes them in trim order. A group runs all it is given when fewer items than ranks
    remain (a rank is left empty, and trim_overload stops at an empty rank)."""
    costs = np.asarray(costs, float)
    owner = np.empty(len(costs), np.int64)
    group = np.empty(len(costs), np.int64)
    pending = np.argsort(-costs, kind="stable")
    balanced, g = True, 0
    while len(pending):
        own, loads = greedy_partition(costs[pending], ranks, presorted=True)
        members = [[] for _ in range(ranks)]
        for k, r in enumerate(own.tolist()):
            members[r].append(k)
        trimmed = trim_overload(costs[pending], own, loads, members, stop_slack)
        kept = own >= 0
        owner[pending[kept]], group[pending[kept]] = own[kept], g
        balanced &= bool(loads.max() - loads.min() <= stop_slack * loads.max())
        pending, g = pending[trimmed], g + 1
    return owner, group, balanced


@dataclass(frozen=True)
class PackedStep:
    samples: np.ndarray  # the step's sample indices, in stream order
    owner: np.ndarray  # the rank of each
    loads: np.ndarray  # per rank: summed partition cost (over all groups of the step)
    converged: bool  # Megatron's stop rule held in every group (always True without one)

    @property
    def ranks(self) -> list[np.ndarray]:
        """Per rank: its sample indices, in stream order."""
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
    linear_coef: float | None = None  # the flops form's c in c*L + L^2
    method: str = "kk"
    stop_slack: float | None = None  # set: Megatron's groups, trimmed to max - min <= this * max
    samples_per_rank: float | None = None  # default M_mem / mean S
    name: str = "pack-kk-fitted"
    cost_form: str = "fitted"

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
        a, b, p = float(cost.fixed_s), float(cost.b), float(cost.p)
        return cls(float(m_mem), a, b, p, coef, cost_form=cost_form, **kw)

    def __post_init__(self) -> None:
        if self.method not in PARTITION:
            raise ValueError(f"method must be one of {sorted(PARTITION)}, got {self.method!r}")
        if self.cost_form not in COST_FORMS:
            raise ValueError(f"cost_form must be one of {COST_FORMS}, got {self.cost_form!r}")

    def sample_cost(self, S) -> np.ndarray:
        S = np.asarray(S, float)
        if self.cost_form == "flops":
            return self.linear_coef * S + S**2
        if self.cost_form == "square":  # Megatron's get_total_workload without CP: L^2
            return S**2
        return self.b * S**self.p + self.a * S / self.m_mem

    def epoch_steps(self, tokens, world: int, seed: int, epoch: int) -> list[PackedStep]:
        """The epoch's steps: each rank's samples, its partition load, the stop rule's verdict."""
        tokens = np.asarray(tokens, np.int64)
        if tokens.max() > self.m_mem:
            raise ValueError(f"a sample of {tokens.max()} tokens exceeds M_mem = {self.m_mem:.0f}")
        per_rank = self.samples_per_rank or self.m_mem / tokens.mean()
        cost = self.sample_cost(tokens)  # priced once per epoch
        stream = np.random.default_rng([seed, epoch]).permutation(len(tokens))
        cum = np.cumsum(cost[stream])
        budget = max(1, round(per_rank * world)) * float(cost.mean())
        bounds = [0]  # each step: the stream's next samples until their cost reaches the budget
        while bounds[-1] < len(stream):
            base = cum[bounds[-1] - 1] if bounds[-1] else 0.0
            end = int(np.searchsorted(cum, base + budget, "left")) + 1
            bounds.append(min(len(stream), max(end, bounds[-1] + 1)))
        steps = []
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            idx, c = stream[lo:hi], cost[stream[lo:hi]]
            if self.stop_slack is None:
                owner, loads = PARTITION[self.method](c, world)
                converged = True
            else:
                owner, _, converged = megatron_groups(c, world, self.stop_slack)
                loads = np.bincount(owner, weights=c, minlength=world).astype(float)
            steps.append(PackedStep(idx, owner, np.asarray(loads, float), converged))
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
    "pack-lpt-flops": {"cost_form": "flops", "method": "greedy"},
    "pack-kk-fitted": {"cost_form": "fitted", "method": "kk"},
    "pack-lpt-fitted": {"cost_form": "fitted", "method": "greedy"},
    "pack-trim-5pct": {"cost_form": "square", "method": "greedy", "stop_slack": 0.05},
}
