"""Coordinated global balancing: each step's samples are partitioned across all ranks.

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
from collections import deque
from dataclasses import dataclass

import numpy as np


def lpt_partition(costs: np.ndarray, ranks: int) -> tuple[np.ndarray, np.ndarray]:
    """(rank of each item, load of each rank) by LPT in rounds of `ranks` items: each round of
    the items sorted largest first goes to the `ranks` least-loaded ranks (vectorised; the
    suite's own planner). greedy_partition is LPT item by item."""
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


def greedy_partition(costs, ranks: int, presorted: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(rank of each item, load of each rank) by LPT as Megatron-LM and KnapFormer run it: the
    items largest first (a stable sort: equal costs keep their order; `presorted`: in the order
    given), each to the rank of least load, ties to the lowest rank. Exact, one heap of (load,
    rank); where lpt_partition deals rounds of `ranks` items, this reconsiders the loads after
    every item."""
    costs = np.asarray(costs, float)
    owner = np.empty(len(costs), np.int64)
    loads = [0.0] * ranks
    heap = [(0.0, r) for r in range(ranks)]
    order = range(len(costs)) if presorted else np.argsort(-costs, kind="stable").tolist()
    c = costs.tolist()
    for i in order:
        load, r = heap[0]
        owner[i] = r
        loads[r] = load + c[i]
        heapq.heapreplace(heap, (loads[r], r))
    return owner, np.asarray(loads, float)


def kk_partition(costs: np.ndarray, ranks: int) -> tuple[np.ndarray, np.ndarray]:
    """(rank of each item, load of each rank) by Karmarkar-Karp largest differencing (verl's
    `karmarkar_karp`, equal_size=False): every item starts as a state of `ranks` sums (its cost
    and zeros); the two states of largest spread (max - min; on a tie the one with the larger
    largest sum, as verl; then the older) merge,
    the largest sums of one meeting the smallest of the other, until one state is left; rank r
    gets the items of the r-th smallest sum. Better than LPT with few items per rank.

    The same merges, in the same order, without that form's n x R arrays: a state whose items
    each sit alone in a sum (every state until it fills up) is its item list, and merging two
    such is a union; a single item met by a full state joins its smallest sum (one insertion);
    only merges of two full states cost O(R). Singletons are read off one sorted array rather
    than the heap. Which rank holds which item is resolved once at the end: a full state's sums
    carry bin ids, and a merge links the bins it pairs. About n steps of O(1) Python plus O(R)
    per full-state merge: tens of ms for 40,000 items on 1,024 ranks, where the n x R form took
    minutes. Costs must be >= 0 (a state's empty sums are its smallest).
    """
    c = np.asarray(costs, float)
    n, R = len(c), int(ranks)
    if R < 1:
        raise ValueError(f"ranks must be >= 1, got {ranks}")
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(R)
    if c.min() < 0:
        raise ValueError(f"costs must be >= 0, got a minimum of {c.min()}")
    if R == 1:
        return np.zeros(n, np.int64), np.array([c.sum()])
    order = np.argsort(-c, kind="stable")  # singletons in heap order: key (-cost, index)
    cs, ids = c[order].tolist(), order.tolist()
    item_bin = np.zeros(n, np.int64)
    absorbed: list[tuple[int, int]] = []  # (item, bin) of single items joining a full state
    links: list[tuple[np.ndarray, np.ndarray]] = []  # (bins, the bins they merged into)
    n_bins = 0

    def full(x):  # any state as R ascending sums and their bin ids
        nonlocal n_bins
        if type(x) is tuple:
            return x
        items = np.asarray([ids[x]] if type(x) is int else x[0], np.int64)
        items = items[np.argsort(c[items], kind="stable")]
        sums = np.zeros(R)
        sums[R - len(items) :] = c[items]
        bins = np.arange(n_bins, n_bins + R)
        item_bin[items] = bins[R - len(items) :]
        n_bins += R
        return sums, bins

    def merge(a, b):  # (state, spread) of two states; a state is a singleton's position p,
        # [items, top, low] while each item has a sum of its own, else (sums, bins)
        if type(a) is int and type(b) is int:
            return [[ids[a], ids[b]], cs[a], cs[b]], cs[a] - (cs[b] if R == 2 else 0.0)
        if type(a) is int or type(b) is int:
            i, x = (a, b) if type(a) is int else (b, a)
            if type(x) is list and len(x[0]) < R:  # a sum of its own
                x[0].append(ids[i])
                x[2] = cs[i]  # singletons come in descending cost: the lowest yet
                return x, x[1] - (x[2] if len(x[0]) == R else 0.0)
            sums, bins = x = full(x)  # the item joins the smallest sum
            v, b0 = sums[0] + cs[i], bins[0]
            k = int(sums[1:].searchsorted(v, "left"))  # a stable sort: before equals
            sums[:k], bins[:k] = sums[1 : k + 1], bins[1 : k + 1]
            sums[k], bins[k] = v, b0
            absorbed.append((ids[i], b0))
            return x, sums[-1] - sums[0]
        if type(a) is list and type(b) is list and len(a[0]) + len(b[0]) <= R:  # a union
            big, small = (a, b) if len(a[0]) >= len(b[0]) else (b, a)
            big[0].extend(small[0])
            x = [big[0], max(a[1], b[1]), min(a[2], b[2])]
            return x, x[1] - (x[2] if len(x[0]) == R else 0.0)
        (s1, b1), (s2, b2) = full(a), full(b)
        s = s1 + s2[::-1]
        o = np.argsort(s, kind="stable")
        links.append((b2[::-1], b1))  # paired sums belong to one rank from here on
        return (s[o], b1[o]), s[o[-1]] - s[o[0]]

    def top(x) -> float:  # a state's largest sum
        return cs[x] if type(x) is int else x[1] if type(x) is list else float(x[0][-1])

    def first(sp: float, tp: float) -> bool:  # (spread, largest sum) pops before the heap's
        return not heap or (sp, tp) > (-heap[0][0], -heap[0][1])

    # merged states: (-spread, -largest sum, tie, state); tie >= n > any singleton's index
    heap: list = []
    neg = -c[order]
    p, tie = 0, n
    while (n - p) + len(heap) > 1:
        v = cs[p] if p < n else -1.0
        if p + 1 < n and cs[p + 1] == v > 0 and (not heap or v > -heap[0][0]):
            # a run of equal singletons above every state: they and what they merge into
            # (spread v, or 0 once level) pop first-in first-out, so merge them off a queue
            end = int(np.searchsorted(neg, -v, side="right"))
            queue, tie = _equal_run(order[p:end], p, v, R, tie, heap)
            p = end
            while len(queue) > 1:
                (a, _), (b, _) = queue.popleft(), queue.popleft()
                x, spread = merge(a, b)
                if spread >= v:  # spread <= max of the two: still v, still first
                    queue.append((x, tie))
                else:
                    heapq.heappush(heap, (-spread, -top(x), tie, x))
                tie += 1
            for x, t in queue:
                heapq.heappush(heap, (-v, -top(x), t, x))
            continue
        pair = []
        for _ in range(2):  # the two largest (spread, largest sum); a singleton wins a tie
            if p < n and (not heap or (cs[p], cs[p]) >= (-heap[0][0], -heap[0][1])):
                pair.append(p)
                p += 1
            else:
                pair.append(heapq.heappop(heap)[3])
        x, spread = merge(*pair)
        # a full state takes the next singleton for as long as the two are the largest: it
        # above the other states and the singleton after (the older wins a tie), the singleton
        # at or above the other states; no heap round trip for each
        while (
            type(x) is tuple
            and p < n
            and first(spread, top(x))
            and (not heap or (cs[p], cs[p]) >= (-heap[0][0], -heap[0][1]))
            and (p + 1 == n or (spread, top(x)) > (cs[p + 1], cs[p + 1]))
        ):
            tie += 1
            x, spread = merge(p, x)
            p += 1
        heapq.heappush(heap, (-spread, -top(x), tie, x))
        tie += 1
    loads, bins = full(heap[0][3] if heap else p)
    for i, bn in absorbed:
        item_bin[i] = bn
    root = np.arange(n_bins)
    for child, into in links:
        root[child] = into
    while True:  # follow links to the bins the last state holds
        nxt = root[root]
        if np.array_equal(nxt, root):
            break
        root = nxt
    rank_of = np.empty(n_bins, np.int64)
    rank_of[bins] = np.arange(R)
    return rank_of[root[item_bin]], np.asarray(loads, float).copy()


def _equal_run(items: np.ndarray, first: int, v: float, R: int, tie: int, heap: list):
    """The first-in first-out merging of g equal singletons (positions first, first + 1, ...
    of the sorted costs; `items` their indices) while every state holds at most R items, on
    state sizes alone: states of k items (k < R: spread v) merge in pairs, a state that reaches
    R items is level (spread 0) and goes to `heap` as [items, v, v]. The queue's states always
    cover the run's items in order, cyclically, so a state is an arc of them. Returns the
    states left, as (state, tie) for the item-by-item merging (an item's position, or
    [items, v, v]), and the next tie."""
    g = len(items)
    runs = deque([[1, g, first]])  # [size, count, tie of the first]: the queue, run-length coded
    off = 0  # where the front state's arc starts in the run's cyclic order
    states = g

    def arc(start: int, k: int) -> list:
        return items[(start + np.arange(k)) % g].tolist()

    while states > 1:
        k, m, _ = runs[0]
        if m >= 2:
            if 2 * k > R:
                break
            q = m // 2
            runs[0][1] -= 2 * q
            runs[0][2] += 2 * q
            if runs[0][1] == 0:
                runs.popleft()
            states -= q if 2 * k < R else 2 * q
            if 2 * k == R:  # level states
                for j in range(q):
                    heapq.heappush(heap, (-0.0, -v, tie + j, [arc(off + 2 * k * j, R), v, v]))
            else:
                runs.append([2 * k, q, tie])
            off += 2 * k * q
            tie += q
        else:
            k2 = runs[1][0]
            if k + k2 > R:
                break
            runs.popleft()
            runs[0][1] -= 1
            runs[0][2] += 1
            if runs[0][1] == 0:
                runs.popleft()
            states -= 1 if k + k2 < R else 2
            if k + k2 == R:
                heapq.heappush(heap, (-0.0, -v, tie, [arc(off, R), v, v]))
            else:
                runs.append([k + k2, 1, tie])
            off += k + k2
            tie += 1
    queue = deque()
    for k, m, t in runs:
        for j in range(m):
            queue.append(
                (first + int((off + j * k) % g), t + j)
                if k == 1
                else ([arc(off + j * k, k), v, v], t + j)
            )
        off += k * m
    return queue, tie


PARTITIONERS = {"lpt": lpt_partition, "kk": kk_partition, "greedy": greedy_partition}


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
    method: str = "lpt"  # "lpt" (vectorised rounds) or "kk" (Karmarkar-Karp)
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
