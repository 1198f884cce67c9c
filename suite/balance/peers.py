"""The balancing policies public training stacks ship, as Plan policies.

Each is described from the project's own code; the code here is ours.

- Open-Sora 1.x, per-bucket batch search (hpcaitech/Open-Sora `scripts/misc/search_bs.py`,
  `configs/opensora-v1-2/misc/bs.py`, `opensora/datasets/sampler.py`). search_bs.py benchmarks a
  base bucket (`cfg.base = ("512", "408")`: a long video at the largest batch that fits, 12 s/it)
  by binary search for the largest B that does not run out of memory, then for every other bucket
  binary-searches B in its bounds, moving up while `step_time < ref_step_time` and keeping the
  closest such B: the largest B whose step stays *below* the base's. There is no tolerance
  parameter; the implied one is a step of B (t(B) < t_ref <= t(B + 1)). A bucket where even B = 1
  is slower than the base gets B = 0 there (skipped); here it keeps B = 1, so every sample runs.
  Open-Sora's VariableVideoBatchSampler then shuffles the batches with a generator seeded by
  seed + epoch (the same on every rank) and deals them round-robin (`bucket_access_list[rank]`):
  the ranks of a step run *different* buckets; balance comes from the equal step times alone
  (report_02.md: "the local batches on different GPUs have different sizes", "balance the GPU
  load by search a good batch size for each bucket"). That is `SearchedBucketBatches`.
  Deviations, deliberate: search_bs.py searches each bucket's configured guess +- variance;
  here [1, the largest B that fits] (the same answer wherever the bounds hold it). Open-Sora's
  sampler drops each bucket's last partial batch (scripts/train.py passes drop_last=True;
  drop_last=False pads it with repeated samples); here that batch runs, smaller (no sample is
  lost or repeated). The shuffles use numpy's generator, not torch's.
  `BucketSynchronous` is the bucket-synchronous reading (every rank draws the same bucket in a
  step): same searched B, ranks identical within a step, the imbalance moved across steps.
- VideoSys's bucket-parallel baseline (NUS-HPC-AI-Lab/VideoSys `videosys/core/dcp/profiler.py`,
  `videosys/training/datasets/open_sora/sampler.py`, `docs/dcp.md`; the baseline DCP is compared
  against, not DCP): each bucket's batch is doubled from 1 until it no longer fits
  `alloc_fraction` of device memory (train.py's default 0.70; the example config 0.65); the last
  batch that fit is the bucket's "max" (B, time). Then `interpolate_profile_results` takes the
  median of those times over buckets and, for every bucket slower than the median, sets
  B = max(1, int(B * median / t)) (faster buckets keep their max). Batches are dealt as
  Open-Sora deals them; the sampler logs the per-step imbalance mean over ranks of
  (max - t) / max (`videosys_imbalance`). That is `ProfiledRescale`.
- VideoSys DCP's data-parallel part (`--auto-grad-accumulation`): every rank draws a bucket and
  runs its profiled batch (of the powers of two that fit, the one of most samples per second),
  gradient-accumulated a per-rank number of times that evens out the ranks' step times
  (`grad_accumulation_counts`). `DCPGradAccumulation`. DCP's other part,
  sequence parallelism sized per bucket, does not arise here (every sample fits one rank).
- Cost-aware packing (verl, slime, Megatron-LM): suite.balance.peers_packing.

The registry (suite.balance.registry) builds each by name from the same PolicyInputs as the
suite's own policies.

Every policy here: deterministic per (seed, epoch); within an epoch every sample runs exactly once
across ranks except the dropped tail (the bucket-dealt ones drop the final incomplete round of
batches, as bucket_epoch_plan does; BucketSynchronous drops, per bucket, the < world samples that
cannot give every rank one more sample; DCPGradAccumulation drops the step the buckets cannot
fill); no micro-batch holds more than the memory cap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from suite.balance.buckets import bucket_index
from suite.balance.plan import Plan, bucket_epoch_plan

# ----------------------------------------------------------------------------- shared pieces


def lengths_of(tokens_or_buckets) -> np.ndarray:
    """The distinct sequence lengths of per-sample token counts or of a bucket table (column S)."""
    if isinstance(tokens_or_buckets, pd.DataFrame):
        if "S" not in tokens_or_buckets:
            raise ValueError(
                f"a bucket table needs a column S, got columns {list(tokens_or_buckets.columns)}"
            )
        S = tokens_or_buckets["S"].to_numpy(np.int64)
    else:
        S = np.asarray(tokens_or_buckets, np.int64)
    if S.size == 0 or (S < 1).any():
        raise ValueError("tokens_or_buckets must hold at least one length, all >= 1")
    return np.unique(S)


def memory_tokens(cost, m_mem: float, alloc_fraction: float | None = None) -> float:
    """The tokens per model batch that fit: m_mem, or with `alloc_fraction` (VideoSys) the B*S
    whose peak m0 + m1*B*S fits alloc_fraction of the device (the cost model's memory fit),
    never more than m_mem."""
    if alloc_fraction is None:
        return float(m_mem)
    if not 0 < alloc_fraction <= 1:
        raise ValueError(f"alloc_fraction must be in (0, 1], got {alloc_fraction}")
    m0, m1, cap = (float(getattr(cost, k, np.nan)) for k in ("m0", "m1", "capacity_bytes"))
    if not (np.isfinite(m0) and np.isfinite(m1) and np.isfinite(cap)) or m1 <= 0:
        raise ValueError("alloc_fraction needs a cost model with a memory fit (m0, m1, capacity)")
    return float(min(m_mem, (alloc_fraction * cap - m0) / m1))


def fitting_batch(S, mem_tokens: float) -> np.ndarray:
    """The largest B with B * S <= mem_tokens (ValueError if one sample alone does not fit)."""
    S = np.asarray(S, np.int64)
    if (S > mem_tokens).any():
        raise ValueError(f"a sample of {S.max()} tokens exceeds the memory cap {mem_tokens:.0f}")
    return np.floor(mem_tokens / S * (1 + 1e-12)).astype(np.int64)


def predicted_rank_loads(plan: Plan, tokens, cost) -> np.ndarray:
    """(steps, world) predicted compute per rank: each micro-batch priced as the simulator
    prices it (simulator.micro_batch_seconds: cost.predict(B, S), a varlen pack per sample)."""
    from suite.balance.simulator import micro_batch_seconds

    return plan.rank_sums(micro_batch_seconds(plan, tokens, cost))


def videosys_imbalance(plan: Plan, tokens, cost) -> np.ndarray:
    """Per step, VideoSys's imbalance rate: the mean over ranks of (max - t) / max (sampler.py's
    `calculate_imbalance`, there with each bucket's profiled time; here cost.predict)."""
    loads = predicted_rank_loads(plan, tokens, cost)
    top = loads.max(axis=1)
    return np.where(top > 0, (top[:, None] - loads).mean(axis=1) / np.maximum(top, 1e-300), 0.0)


# ----------------------------------------------------------------------------- Open-Sora


def search_batch_sizes(cost, S, base_S: int | None = None, mem_cap: float | None = None):
    """Open-Sora's search_bs.py against a cost model: B per length in S.

    The base bucket (default the longest S, the one whose memory-bound batch is slowest to reach)
    gets the largest B that fits (B * S <= mem_cap, default cost.m_mem); its step time t_ref =
    cost.predict(B_base, base_S). Every other bucket gets, by binary search over [1, B that fits],
    the largest B with cost.predict(B, S) < t_ref (at least 1). With a step time monotone in B:
    t(B) < t_ref <= t(B + 1) unless B is memory-capped or 1."""
    S = np.asarray(S, np.int64)
    mem_cap = float(cost.m_mem if mem_cap is None else mem_cap)
    base_S = int(S.max() if base_S is None else base_S)
    hi = fitting_batch(S, mem_cap)
    t_ref = float(cost.predict(fitting_batch(base_S, mem_cap), base_S))
    lo, best = np.ones_like(hi), np.ones_like(hi)
    while (lo <= hi).any():  # all buckets at once; each narrows as search_bs.py does
        live = lo <= hi
        mid = (lo + hi) // 2
        below = live & (np.asarray(cost.predict(mid, S), float) < t_ref)
        best = np.where(below, mid, best)
        lo = np.where(below, mid + 1, lo)
        hi = np.where(live & ~below, mid - 1, hi)
    return np.where(S == base_S, fitting_batch(base_S, mem_cap), best)


@dataclass(frozen=True)
class SearchedBucketBatches:
    """Open-Sora 1.x: searched B per bucket, batches dealt round-robin (module docstring)."""

    cost: object
    m_mem: float
    base_S: int
    name: str = "opensora-searched"

    def batch_size(self, S) -> np.ndarray:
        return search_batch_sizes(self.cost, S, self.base_S, self.m_mem)

    def epoch_plan(self, tokens, world: int, seed: int, epoch: int) -> Plan:
        return bucket_epoch_plan(tokens, self.batch_size, world, seed, epoch, self.name)


def synchronous_bucket_plan(
    tokens, batch_size: Callable, world: int, seed: int, epoch: int, policy: str = ""
) -> Plan:
    """Every rank runs the same bucket at each step. With a generator seeded by (seed, epoch),
    each bucket is shuffled and cut into rounds of world * B samples (one step: every rank B of
    them); a bucket's remainder gives one more round of world * (rem // world) samples; the
    rounds are shuffled into steps. Per bucket the last rem % world samples are dropped."""
    S, bucket = bucket_index(tokens)
    B = np.asarray(batch_size(S), np.int64)
    if (B < 1).any():
        raise ValueError(f"the policy gave batch sizes < 1: {B.min()}")
    rng = np.random.default_rng([seed, epoch])
    rounds = []  # (per-rank batch size, world * b samples)
    for k in range(len(S)):
        idx = rng.permutation(np.flatnonzero(bucket == k))
        full = len(idx) // (world * B[k])
        rounds += [(B[k], r) for r in np.split(idx[: full * world * B[k]], full)] if full else []
        tail = (len(idx) - full * world * B[k]) // world
        if tail:
            start = full * world * B[k]
            rounds.append((tail, idx[start : start + world * tail]))
    order = rng.permutation(len(rounds))
    samples = [rounds[j][1] for j in order]
    per = np.array([rounds[j][0] for j in order], np.int64)
    batch_of = [
        step * world + np.arange(world * b) // b for step, b in enumerate(per)
    ]  # step k's batches are k*world .. k*world + world - 1, b samples each
    if not samples:
        return Plan.from_batches(world, np.zeros(0, np.int64), np.zeros(0, np.int64), policy)
    return Plan.from_batches(world, np.concatenate(batch_of), np.concatenate(samples), policy)


@dataclass(frozen=True)
class BucketSynchronous:
    """Open-Sora's searched B with every rank on the same bucket in a step (a bucket-synchronous
    reading of Open-Sora, whose sampler deals different buckets per rank): rank compute equal within a step,
    step times differ across steps."""

    cost: object
    m_mem: float
    base_S: int
    name: str = "bucket-sync"

    def batch_size(self, S) -> np.ndarray:
        return search_batch_sizes(self.cost, S, self.base_S, self.m_mem)

    def epoch_plan(self, tokens, world: int, seed: int, epoch: int) -> Plan:
        return synchronous_bucket_plan(tokens, self.batch_size, world, seed, epoch, self.name)


# ----------------------------------------------------------------------------- VideoSys baseline


def profiled_batch_sizes(cost, S, mem_tokens: float, median_s: float) -> np.ndarray:
    """VideoSys's profile and rescale: the largest power-of-two B that fits (doubling from 1
    until out of memory), then for buckets slower than `median_s`, B = max(1, int(B * median_s /
    t)) (their rescale assumes time proportional to B)."""
    S = np.asarray(S, np.int64)
    b_max = 2 ** np.floor(np.log2(fitting_batch(S, mem_tokens))).astype(np.int64)
    t = np.asarray(cost.predict(b_max, S), float)
    rescaled = np.maximum(1, (b_max * median_s / t).astype(np.int64))
    return np.where(t > median_s, rescaled, b_max)


@dataclass(frozen=True)
class ProfiledRescale:
    """VideoSys's bucket-parallel baseline: profiled max batch per bucket, rescaled toward the
    median time (the baseline DCP is measured against)."""

    cost: object
    mem_tokens: float
    median_s: float  # the median over buckets of the profiled max-batch step times
    name: str = "videosys-profiled"

    @classmethod
    def profile(
        cls, cost, buckets, m_mem: float, alloc_fraction: float | None = None
    ) -> ProfiledRescale:
        """Profile the buckets (distinct lengths of `buckets`) under the memory cap; the default
        alloc_fraction=None keeps the suite's M_mem (the same cap as every other policy; VideoSys
        ships 0.70 to leave room for NCCL)."""
        S = lengths_of(buckets)
        mem = memory_tokens(cost, m_mem, alloc_fraction)
        b_max = 2 ** np.floor(np.log2(fitting_batch(S, mem))).astype(np.int64)
        median = float(np.median(np.asarray(cost.predict(b_max, S), float)))
        return cls(cost, mem, median)

    def batch_size(self, S) -> np.ndarray:
        return profiled_batch_sizes(self.cost, S, self.mem_tokens, self.median_s)

    def epoch_plan(self, tokens, world: int, seed: int, epoch: int) -> Plan:
        return bucket_epoch_plan(tokens, self.batch_size, world, seed, epoch, self.name)


# ----------------------------------------------------------------------------- VideoSys DCP


def grad_accumulation_counts(exec_times, max_steps: int = 3, min_steps: int = 2) -> np.ndarray:
    """DCP's per-rank gradient accumulation counts (VideoSys sampler.py,
    `_calculate_grad_accumulation_num`): for each rank's exec_time * mult as the target (mult up
    to the longest time x max_steps), every rank takes the count whose exec_time * count is
    closest to it (over the target costs 1.2 per second, under 1; the first such count); the
    target of least summed cost wins (the first). Counts below min_steps are scaled up together.
    Computed once per distinct time: repeated times give repeated rows and an equal sum."""
    t = np.asarray(exec_times, float)
    max_time = float(t.max()) * max_steps
    vals, first, inv = np.unique(t, return_index=True, return_inverse=True)
    g = np.arange(1, int(max_time / vals.min()) + 1)  # every count, for every distinct time
    tt = vals[:, None] * g  # each time x each count; beyond max_time (or its int) excluded
    tt[(tt > max_time) | (g > (max_time / vals[:, None]).astype(np.int64))] = np.inf
    best, best_diff = None, np.inf
    for outer in t[np.sort(first)]:
        for mult in range(1, int(max_time / outer) + 1):
            target = outer * mult
            if target > max_time:
                break
            score = np.where(tt > target, (tt - target) * 1.2, (target - tt) * 1)
            j = np.argmin(score, axis=1)  # the first count of least cost
            diff = score[np.arange(len(vals)), j]
            total = float(np.cumsum(diff[inv])[-1])  # summed rank by rank, as the source
            if total < best_diff:
                best, best_diff = g[j][inv], total
    if best.max() < min_steps:
        best = best * int(np.ceil(min_steps / best.max()))
    return best


@dataclass(frozen=True)
class DCPGradAccumulation:
    """VideoSys DCP's data-parallel balance (`--auto-grad-accumulation`, sampler.py's
    `_build_local_bucket_id_access_order_acc` with every bucket at sequence-parallel size 1):
    each step every rank draws a random bucket among those with samples left and takes one batch
    of the bucket's profiled B (batch_size); grad_accumulation_counts on the buckets' max-batch times gives each rank its
    count, and the rank takes count - 1 more batches of its bucket while it has samples. A
    bucket's last batch may be short (keep_last, the sampler's default); a step for which the
    buckets run out before every rank has drawn one is dropped, as the source drops it. Loss
    weight: batch samples / the step's samples."""

    cost: object
    mem_tokens: float
    max_steps: int = 3  # train.py's --max-grad-accumulation-steps
    min_steps: int = 2  # --min-grad-accumulation-steps
    name: str = "videosys-dcp"

    @classmethod
    def profile(cls, cost, m_mem: float, alloc_fraction: float | None = None, **kw):
        return cls(cost, memory_tokens(cost, m_mem, alloc_fraction), **kw)

    def batch_size(self, S) -> np.ndarray:
        """Per length, of the profiled powers of two that fit, the B of most samples per second
        (the profiler's `best`, at sequence-parallel size 1; the first of equals)."""
        out = []
        for s, top in zip(np.atleast_1d(S), np.atleast_1d(fitting_batch(S, self.mem_tokens))):
            B = 2 ** np.arange(int(np.log2(top)) + 1)
            out.append(B[np.argmax(B / np.asarray(self.cost.predict(B, s), float))])
        return np.asarray(out, np.int64)

    def epoch_plan(self, tokens, world: int, seed: int, epoch: int) -> Plan:
        S, bucket = bucket_index(tokens)
        B = self.batch_size(S)
        exec_time = np.asarray(self.cost.predict(B, S), float)
        rng = np.random.default_rng([seed, epoch])
        queue = [list(rng.permutation(np.flatnonzero(bucket == k))) for k in range(len(S))]
        live = [k for k in range(len(S)) if queue[k]]  # buckets with samples, in order
        steps, weights = [], []

        def take(k):
            out, queue[k] = queue[k][: B[k]], queue[k][B[k] :]
            if not queue[k]:
                live.remove(k)
            return out

        while live:
            picks, first = [], []
            for _ in range(world):
                if not live:
                    break
                k = live[int(rng.integers(len(live)))]
                picks.append(k)
                first.append(take(k))
            if len(picks) < world:  # the source discards an iteration it cannot fill
                break
            gas = grad_accumulation_counts(exec_time[picks], self.max_steps, self.min_steps)
            ranks = []
            for k, mb, g in zip(picks, first, gas.tolist()):
                mbs = [mb]
                while len(mbs) < g and queue[k]:
                    mbs.append(take(k))
                ranks.append(mbs)
            n = sum(len(mb) for mbs in ranks for mb in mbs)
            steps.append(ranks)
            weights.append([[len(mb) / n for mb in mbs] for mbs in ranks])
        return Plan.from_micro_batches(world, steps, weights, self.name)
