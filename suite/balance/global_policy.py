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
4. each rank runs its samples as ceil(tokens / M_mem) micro-batches of at most M_mem tokens with
   gradient accumulation (the count is the packing lower bound), so ranks may run different numbers
   of micro-batches. The loss must then be normalised by the step's global token count
   (`loss_weights`) so the gradient equals standard data parallelism's.
An optional online calibration rescales the planner's b from observed per-rank times.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd


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


@dataclass
class OnlineCalibration:
    """Rescales the planner's b from observed rank times (exponential moving average of the ratio
    observed / predicted variable time)."""

    b: float
    rate: float = 0.2

    def update(self, predicted_var: np.ndarray, observed_var: np.ndarray) -> float:
        pred, obs = float(np.sum(predicted_var)), float(np.sum(observed_var))
        if pred > 0 and obs > 0:
            self.b *= (obs / pred) ** self.rate
        return self.b


@dataclass(frozen=True)
class Plan:
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
) -> Plan:
    """The planner for one step: bounded deferral, then LPT over `ranks`.

    target is the intended rank load (default: the candidates' total cost / ranks).
    """
    S = np.asarray(S, float)
    cost = b * S**p + a * S / m_mem
    target = cost.sum() / ranks if target is None else target
    defer = deferrable(cost, age, target, max_defer, defer_above)
    if defer.all():  # never leave a step empty
        defer[:] = False
    run = np.flatnonzero(~defer)
    if method not in PARTITIONERS:
        raise ValueError(f"unknown partition method {method!r}; accepted: {sorted(PARTITIONERS)}")
    owner, loads = PARTITIONERS[method](cost[run], ranks)
    return Plan(owner, run, np.flatnonzero(defer), loads)


@dataclass(frozen=True)
class GlobalPolicy:
    """Per-step coordinated LPT assignment under a per-micro-batch token cap M_mem."""

    m_mem: float
    samples_per_rank: float | None = None  # candidates per rank per step; default M_mem / mean S
    max_defer: int = 1
    defer_above: float = 1.0
    recalibrate: bool = False
    planner_error: float = 1.0  # planner's b = true b x this (to study calibration)
    budget: str = "cost"  # "cost": each step takes samples up to a predicted-cost budget; "count"
    method: str = "lpt"  # "lpt" (vectorised rounds) or "kk" (Karmarkar-Karp, small R)
    # the power law a + b*B*S^p the planner predicts with; None: the simulated step model itself.
    # With another step model (balance: the sweep's quadratic fit) the simulated costs are that
    # model's (sample_cost, fixed_s) and the planner keeps the power law a user would fit
    planner: object | None = None
    name: str = "global"
    _timings: list = field(default_factory=list, compare=False, repr=False)

    def epoch_plan(self, tokens, world: int, seed: int, epoch: int):
        """One epoch as a Plan (suite.balance.plan): the epoch's shuffled stream, seeded by
        (seed, epoch), cut into steps of equal predicted cost, each planned by `plan_step`
        (deferred samples go to the front of the next step, none past the epoch's end); each
        rank's samples packed into micro-batches of <= M_mem tokens (`micro_batches`), then
        regrouped into model batches of one length (`same_length_batches`), weight = tokens /
        the step's global tokens. Needs `planner` (the cost model a user fitted)."""
        from suite.balance.plan import Plan

        if self.planner is None:
            raise ValueError("GlobalPolicy.epoch_plan needs planner= (a fitted cost model)")
        tokens = np.asarray(tokens, np.int64)
        if tokens.max() > self.m_mem:
            raise ValueError(f"a sample of {tokens.max()} tokens exceeds M_mem = {self.m_mem:.0f}")
        R = world
        a, b, p = float(self.planner.fixed_s), float(self.planner.b), float(self.planner.p)

        def cost(S):
            return b * S.astype(float) ** p + a * S / self.m_mem

        per_rank = self.samples_per_rank or self.m_mem / tokens.mean()
        n = max(1, int(round(per_rank * R)))
        q = np.random.default_rng([seed, epoch]).permutation(len(tokens))
        age = np.zeros(len(q), np.int64)
        budget = n * float(cost(tokens).mean())
        steps, weights = [], []
        while len(q):
            c = cost(tokens[q])
            c[deferrable(c, age, budget / R, self.max_defer, self.defer_above)] = 0
            take = min(int(np.searchsorted(np.cumsum(c), budget)) + 1, len(q))
            if take == len(q):  # the epoch's last step: nothing may be deferred past the end
                age[:] = self.max_defer
            idx, a_idx, q, age = q[:take], age[:take], q[take:], age[take:]
            pl = plan_step(
                tokens[idx], a_idx, R, a, b, p, self.m_mem, self.max_defer, self.defer_above,
                target=budget / R, method=self.method,
            )  # fmt: skip
            run = idx[pl.run]
            g = int(tokens[run].sum())
            ranks = [
                same_length_batches(micro_batches(run[pl.owner == r], tokens, self.m_mem), tokens)
                for r in range(R)
            ]
            steps.append(ranks)
            weights.append([[len(mb) * int(tokens[mb[0]]) / g for mb in mbs] for mbs in ranks])
            q = np.concatenate([idx[pl.deferred], q])
            age = np.concatenate([a_idx[pl.deferred] + 1, age])
        return Plan.from_micro_batches(R, steps, weights, self.name)

    def candidates_per_step(self, buckets: pd.DataFrame, ranks: int) -> int:
        share = buckets["share"].to_numpy(float)
        mean_s = float(np.dot(share / share.sum(), buckets["S"].to_numpy(float)))
        per_rank = self.samples_per_rank or self.m_mem / mean_s
        return max(1, int(round(per_rank * ranks)))

    def simulate(self, buckets: pd.DataFrame, cost, cfg):
        from suite.balance.simulator import SimResult

        S_k = buckets["S"].to_numpy(np.int64)
        if S_k.max() > self.m_mem:
            raise ValueError(
                f"a sample of {S_k.max()} tokens exceeds the micro-batch cap "
                f"M_mem = {self.m_mem:.0f}; raise M_mem or split sequences"
            )
        cdf = np.cumsum(buckets["share"].to_numpy(float))
        cdf /= cdf[-1]
        n = self.candidates_per_step(buckets, cfg.ranks)
        rng = np.random.default_rng([cfg.seed, cfg.ranks, 7])
        plan_m = cost if self.planner is None else self.planner
        R, a, p = cfg.ranks, float(plan_m.fixed_s), float(plan_m.p)
        calib = OnlineCalibration(b=float(plan_m.b) * self.planner_error)
        share = buckets["share"].to_numpy(float)
        # the step's predicted-cost budget: n samples of mean cost, so steps carry equal work
        mean_sp = float(np.dot(share / share.sum(), S_k.astype(float) ** p))
        mean_fixed = float(np.dot(share / share.sum(), a * S_k / self.m_mem))
        shape = (cfg.steps, R)
        comp, toks, cnt = np.zeros(shape), np.zeros(shape, np.int64), np.zeros(shape, np.int64)
        q_S, q_age = np.zeros(0, np.int64), np.zeros(0, np.int64)  # deferred first, then stream
        delays, planner_s = [], []
        for t in range(cfg.steps):
            if len(q_S) < 2 * n:  # refill the stream from the sampler's seeded order
                new = S_k[
                    np.minimum(np.searchsorted(cdf, rng.random(2 * n), side="right"), len(S_k) - 1)
                ]
                q_S = np.concatenate([q_S, new])
                q_age = np.concatenate([q_age, np.zeros(len(new), np.int64)])
            budget = n * (calib.b * mean_sp + mean_fixed)  # follows the calibration
            if self.budget == "cost":  # shortest prefix whose runnable samples reach the budget
                c = calib.b * q_S.astype(float) ** p + a * q_S / self.m_mem
                c[deferrable(c, q_age, budget / R, self.max_defer, self.defer_above)] = 0
                take = min(int(np.searchsorted(np.cumsum(c), budget)) + 1, len(q_S))
            else:
                take = n
            S, age, q_S, q_age = q_S[:take], q_age[:take], q_S[take:], q_age[take:]
            t0 = time.perf_counter()
            plan = plan_step(
                S,
                age,
                R,
                a,
                calib.b,
                p,
                self.m_mem,
                self.max_defer,
                self.defer_above,
                target=budget / R if self.budget == "cost" else None,
                method=self.method,
            )
            planner_s.append(time.perf_counter() - t0)
            s_run = S[plan.run]
            var = np.asarray(cost.sample_cost(s_run), float)  # the step model's, not the planner's
            if cfg.noise_cv > 0:
                var = var * rng.gamma(1 / cfg.noise_cv**2, cfg.noise_cv**2, len(var))
            tok = np.bincount(plan.owner, weights=s_run, minlength=R).astype(np.int64)
            micro = np.ceil(tok / self.m_mem)
            observed = np.bincount(plan.owner, weights=var, minlength=R)
            comp[t], toks[t], cnt[t] = (
                float(cost.fixed_s) * micro + observed,
                tok,
                np.bincount(plan.owner, minlength=R),
            )
            delays.append(age[plan.run])
            if self.recalibrate:
                calib.update(
                    np.bincount(
                        plan.owner, weights=calib.b * s_run.astype(float) ** p, minlength=R
                    ),
                    observed,
                )
            q_S = np.concatenate([S[plan.deferred], q_S])
            q_age = np.concatenate([age[plan.deferred] + 1, q_age])
        step_s = comp.max(axis=1) + cfg.collective_s + cfg.optimizer_s
        d = np.concatenate(delays)
        extra = {
            "mean_delay_steps": float(d.mean()),
            "deferred_share": float((d > 0).mean()),
            "planner_ms": 1e3 * float(np.median(planner_s)),
        }
        return SimResult(self.name, R, np.zeros(shape, np.int64), cnt, toks, comp, step_s, extra)


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


def micro_batches(indices, tokens, m_mem: float) -> list[list[int]]:
    """First-fit decreasing packing of one rank's samples into micro-batches of <= m_mem tokens."""
    bins: list[list[int]] = []
    room: list[float] = []
    for i in sorted(indices, key=lambda j: -tokens[j]):
        for k, r in enumerate(room):
            if tokens[i] <= r:
                bins[k].append(int(i))
                room[k] -= tokens[i]
                break
        else:
            bins.append([int(i)])
            room.append(m_mem - tokens[i])
    return bins


def same_length_batches(micro_batches, tokens, cap: float | None = None) -> list[list[int]]:
    """A rank's samples regrouped into model batches of one sequence length each (longest first),
    of at most `cap` tokens (default: the rank's largest micro-batch, so no batch needs more
    memory than the packing's). Fewer forward passes than running each mixed micro-batch as its
    own sub-batches; the rank's samples, hence its gradient contribution, are the same."""
    idx = [int(i) for mb in micro_batches for i in mb]
    if not idx:
        return []
    if cap is None:
        cap = max(int(sum(tokens[i] for i in mb)) for mb in micro_batches)
    groups: dict[int, list[int]] = {}
    for i in idx:
        groups.setdefault(int(tokens[i]), []).append(i)
    out = []
    for s in sorted(groups, reverse=True):
        per = max(1, int(cap // s))
        out += [groups[s][k : k + per] for k in range(0, len(groups[s]), per)]
    return out


@dataclass(frozen=True)
class StepPlan:
    ranks: list  # per rank: list of micro-batches (lists of sample indices)
    global_tokens: int  # normalise the loss by this (see loss_weights)


class GlobalBatchSampler:
    """The global policy as a torch-compatible batch sampler (duck typing, no torch import).

    Every rank builds the same plan from (seed, epoch): the epoch's shuffled stream is cut into steps
    of equal predicted cost, each step is planned with `plan_step`, deferred samples go to the front
    of the next step. `__iter__` yields this rank's sample indices per step (possibly an empty list
    when a rank gets nothing); `plan()` gives every rank's micro-batches and the step's global
    token count for loss normalisation. Every sample runs exactly once per epoch.
    """

    def __init__(
        self,
        tokens,
        cost,
        m_mem: float,
        *,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        samples_per_rank: float | None = None,
        max_defer: int = 1,
        defer_above: float = 1.0,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        self.tokens = np.asarray(tokens, np.int64)
        if self.tokens.max() > m_mem:
            raise ValueError(f"a sample of {self.tokens.max()} tokens exceeds M_mem = {m_mem:.0f}")
        self.cost, self.m_mem, self.rank, self.world_size = cost, float(m_mem), rank, world_size
        self.seed, self.max_defer, self.defer_above = seed, max_defer, defer_above
        per_rank = samples_per_rank or self.m_mem / self.tokens.mean()
        self.n = max(1, int(round(per_rank * world_size)))
        self.epoch, self.start_step, self._cache = 0, 0, None

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self.start_step = int(epoch), 0

    def resume(self, step: int) -> None:
        self.start_step = int(step)

    def _cost(self, S):
        a, b, p = float(self.cost.fixed_s), float(self.cost.b), float(self.cost.p)
        return b * S.astype(float) ** p + a * S / self.m_mem

    def plan(self) -> list[StepPlan]:
        """Every step of the epoch, for every rank (cached per epoch)."""
        if self._cache is not None and self._cache[0] == self.epoch:
            return self._cache[1]
        R, a, b, p = self.world_size, float(self.cost.fixed_s), float(self.cost.b), self.cost.p
        q = np.random.default_rng([self.seed, self.epoch]).permutation(len(self.tokens))
        age = np.zeros(len(q), np.int64)
        budget = self.n * float(self._cost(self.tokens).mean())
        steps = []
        while len(q):
            c = self._cost(self.tokens[q])
            c[deferrable(c, age, budget / R, self.max_defer, self.defer_above)] = 0
            take = min(int(np.searchsorted(np.cumsum(c), budget)) + 1, len(q))
            if take == len(q):  # the epoch's last step: nothing may be deferred past the end
                age[:] = self.max_defer
            idx, a_idx, q, age = q[:take], age[:take], q[take:], age[take:]
            pl = plan_step(
                self.tokens[idx],
                a_idx,
                R,
                a,
                b,
                p,
                self.m_mem,
                self.max_defer,
                self.defer_above,
                target=budget / R,
            )
            run = idx[pl.run]
            per_rank = [
                micro_batches(run[pl.owner == r], self.tokens, self.m_mem) for r in range(R)
            ]
            steps.append(StepPlan(per_rank, int(self.tokens[run].sum())))
            q = np.concatenate([idx[pl.deferred], q])
            age = np.concatenate([a_idx[pl.deferred] + 1, age])
        self._cache = (self.epoch, steps)
        return steps

    def __iter__(self):
        for st in self.plan()[self.start_step :]:
            yield [i for mb in st.ranks[self.rank] for i in mb]

    def __len__(self) -> int:
        return max(0, len(self.plan()) - self.start_step)
