"""The plan: which samples every rank trains at every step, in which micro-batches, with which weight.

Every batching policy yields a Plan (`plan_steps(policy, tokens, world, steps, seed)`); the trainer
runs it (suite.train.step.train_step: one step on one torchrun rank, or on every virtual rank of
the one-GPU emulator) and the simulator costs it without running it (suite.balance.simulator).
A new policy only has to say how it builds one epoch's plan: `policy.epoch_plan(tokens, world,
seed, epoch) -> Plan`.

Layout: parallel arrays, one entry per micro-batch (`mb_*`, sorted by step, then rank, then
micro-batch order) and the micro-batches' sample indices concatenated (`samples`, micro-batch i
holds samples[mb_start[i]:mb_start[i + 1]]). Invariants (`check`):
- a micro-batch holds samples of one sequence length: it is one model batch; except in a packed
  plan (`packed`), whose micro-batches are varlen packs: samples of any lengths run as one
  forward (varlen attention, each sample attending to itself), as KnapFormer, LoongForge and
  verl/slime/Megatron's remove-padding packing run a rank's share (`Plan.pack`, `Packed`);
- its weight multiplies its loss, the mean over its latent elements (a pack's: over all its
  samples' elements, so a pack is token-weighted inside); summed over a step's
  micro-batches on every rank (all_reduce SUM), the weights are 1, so the step's gradient is a
  weighted mean over the global batch (1/world per rank for one batch per rank, as DDP averages;
  tokens / global tokens for token-weighted packers);
- within an epoch plan every sample appears at most once (exactly once without drop_last).
A rank may have no micro-batch in a step (it then joins the all-reduce with zero gradients).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class MicroBatch:
    indices: np.ndarray  # sample indices, all of one sequence length unless the plan is packed
    weight: float  # loss weight (see the module docstring)


@dataclass(frozen=True)
class Plan:
    world: int
    steps: int
    mb_step: np.ndarray  # (n_mb,) step of each micro-batch
    mb_rank: np.ndarray  # (n_mb,) rank that runs it
    mb_weight: np.ndarray  # (n_mb,) its loss weight
    mb_start: np.ndarray  # (n_mb + 1,) offsets into samples
    samples: np.ndarray  # sample indices, micro-batch by micro-batch
    policy: str = ""
    packed: bool = False  # micro-batches are varlen packs of mixed lengths (module doc)

    # ------------------------------------------------------------------ building
    @staticmethod
    def from_micro_batches(
        world: int, steps: list[list[list]], weights: list[list[list[float]]], policy: str = ""
    ) -> Plan:
        """steps[k][r] = rank r's micro-batches (lists of sample indices) at step k, with
        weights[k][r][m] the weight of micro-batch m."""
        st, rk, w, sizes, flat = [], [], [], [], []
        for k, ranks in enumerate(steps):
            if len(ranks) != world:
                raise ValueError(f"step {k} has {len(ranks)} ranks, the plan has world = {world}")
            for r, mbs in enumerate(ranks):
                for m, mb in enumerate(mbs):
                    st.append(k), rk.append(r), w.append(float(weights[k][r][m]))
                    sizes.append(len(mb))
                    flat.extend(int(i) for i in mb)
        return Plan(
            world,
            len(steps),
            np.asarray(st, np.int64),
            np.asarray(rk, np.int64),
            np.asarray(w, float),
            np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64),
            np.asarray(flat, np.int64),
            policy,
        )

    @staticmethod
    def from_batches(
        world: int, batch_of: np.ndarray, sample: np.ndarray, policy: str = ""
    ) -> Plan:
        """One batch per rank per step, dealt round-robin: batch j (0, 1, ...) runs at step
        j // world on rank j % world with weight 1 / world. `batch_of[i]` is the batch of
        samples[i]; samples must be grouped by batch in batch order. Batches past the last full
        round are dropped."""
        batch_of, sample = np.asarray(batch_of, np.int64), np.asarray(sample, np.int64)
        n_batches = int(batch_of.max()) + 1 if len(batch_of) else 0
        steps = n_batches // world
        keep = batch_of < steps * world
        batch_of, sample = batch_of[keep], sample[keep]
        starts = np.searchsorted(batch_of, np.arange(steps * world + 1))
        j = np.arange(steps * world)
        return Plan(
            world,
            steps,
            j // world,
            j % world,
            np.full(len(j), 1.0 / world),
            starts.astype(np.int64),
            sample,
            policy,
        )

    @staticmethod
    def from_assignment(
        world: int,
        steps: int,
        sample: np.ndarray,
        step: np.ndarray,
        rank: np.ndarray,
        tokens,
        cap: float,
        policy: str = "",
    ) -> Plan:
        """Samples assigned to (step, rank), each rank's samples of a step regrouped into model
        batches of one length, longest first, of B = max(1, floor(cap / S)) samples at most
        (in assignment order within a length), weight = batch tokens / the step's tokens.
        One vectorised pass (no loop over steps or ranks)."""
        tokens = np.asarray(tokens, np.int64)
        sample, step, rank = (np.asarray(x, np.int64) for x in (sample, step, rank))
        S = tokens[sample]
        smax = int(S.max()) + 1 if len(S) else 1
        key = (step * world + rank) * smax + (smax - 1 - S)  # (step, rank, longest first)
        o = np.argsort(key, kind="stable")  # stable: assignment order within one length
        key, sample = key[o], sample[o]  # step, rank and S read back from the sorted key
        sr, S = np.divmod(key, smax)
        S = smax - 1 - S
        step, rank = np.divmod(sr, world)
        n = len(sample)
        head = np.ones(n, bool)  # first sample of a (step, rank, S) group
        head[1:] = (step[1:] != step[:-1]) | (rank[1:] != rank[:-1]) | (S[1:] != S[:-1])
        gstart = np.flatnonzero(head)
        pos = np.arange(n) - gstart[np.cumsum(head) - 1]
        k = pos // np.maximum(1, np.floor(cap / S * (1 + 1e-12)).astype(np.int64))
        first = head.copy()
        first[1:] |= k[1:] != k[:-1]
        mb = np.flatnonzero(first)
        start = np.append(mb, n).astype(np.int64)
        g = np.bincount(step, weights=S, minlength=steps)
        w = np.diff(start) * S[mb] / g[step[mb]] if n else np.zeros(0)
        return Plan(world, int(steps), step[mb], rank[mb], w, start, sample, policy)

    # ------------------------------------------------------------------ reading
    def rank_sums(self, values) -> np.ndarray:
        """(steps, world) array: per-micro-batch `values` summed per step and rank (0 where a
        rank has no micro-batch)."""
        key = self.mb_step * self.world + self.mb_rank
        flat = np.bincount(key, weights=values, minlength=self.steps * self.world)
        return flat.reshape(self.steps, self.world)

    @property
    def n_micro(self) -> int:
        return len(self.mb_step)

    def micro_batches(self, step: int, rank: int) -> list[MicroBatch]:
        """Rank `rank`'s micro-batches at step `step`, in execution order."""
        lo, hi = np.searchsorted(self._key(), [self._k(step, rank), self._k(step, rank + 1)])
        return [
            MicroBatch(
                self.samples[self.mb_start[i] : self.mb_start[i + 1]], float(self.mb_weight[i])
            )
            for i in range(lo, hi)
        ]

    def step_samples(self, step: int) -> np.ndarray:
        """Every sample of step `step`, all ranks."""
        lo, hi = np.searchsorted(self.mb_step, [step, step + 1])
        return self.samples[self.mb_start[lo] : self.mb_start[hi]]

    def lengths(self, tokens) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(B, S, tokens) per micro-batch: its samples, its one length (0: a mixed pack), the
        sum of its samples' tokens."""
        tokens = np.asarray(tokens, np.int64)
        if not self.n_micro:
            return (np.zeros(0, np.int64),) * 3
        t = tokens[self.samples]
        lo = self.mb_start[:-1]
        hi, low = np.maximum.reduceat(t, lo), np.minimum.reduceat(t, lo)
        return np.diff(self.mb_start), np.where(hi == low, hi, 0), np.add.reduceat(t, lo)

    def table(self, tokens) -> pd.DataFrame:
        """One row per micro-batch: step, rank, B, S (its one length; 0 for a mixed pack),
        tokens, weight."""
        B, S, tok = self.lengths(tokens)
        return pd.DataFrame(
            {
                "step": self.mb_step,
                "rank": self.mb_rank,
                "B": B,
                "S": S,
                "tokens": tok,
                "weight": self.mb_weight,
            }
        )

    def pack(self, tokens, cap: float) -> Plan:
        """This plan with each rank's samples of a step run as varlen packs: in the plan's order
        (longest first where from_assignment built it), cut into consecutive packs of at most
        `cap` tokens (the memory budget; a sample over it alone is its own pack), each pack's
        weight the sum of its samples' shares of their micro-batches' weights. Packing needs
        token-proportional weights (a pack's loss is token-weighted inside): ValueError where a
        rank's micro-batches of a step carry weights that are not."""
        tokens = np.asarray(tokens, np.int64)
        if not self.n_micro:
            return replace(self, packed=True)
        B, _, tok = self.lengths(tokens)
        per_tok = np.repeat(self.mb_weight / tok, B)  # weight per token of each sample
        key = np.repeat(self._key(), B)
        head = np.r_[True, key[1:] != key[:-1]]
        g = np.cumsum(head) - 1  # rank-step group of each sample
        ref = per_tok[np.flatnonzero(head)][g]
        if not np.allclose(per_tok, ref, rtol=1e-9, atol=0):
            raise ValueError(
                f"{self.policy or 'the plan'}: a rank's micro-batches carry weights not in "
                "proportion to their tokens, so they cannot be packed into one loss"
            )
        t = tokens[self.samples]
        cum = np.r_[0, np.cumsum(t)]
        lo = np.flatnonzero(head)
        hi = np.r_[lo[1:], len(t)]
        starts, cur, grp = [], lo, np.arange(len(lo))
        while len(cur):  # one pass per pack of the fullest rank-step (a few)
            starts.append(cur)
            end = np.searchsorted(cum, cum[cur] + cap * (1 + 1e-12), side="right") - 1
            end = np.minimum(np.maximum(end, cur + 1), hi[grp])
            more = end < hi[grp]
            cur, grp = end[more], grp[more]
        start = np.sort(np.concatenate(starts)).astype(np.int64)
        w = np.add.reduceat(per_tok * t, start)
        mb = np.append(start, len(t)).astype(np.int64)
        sk, rk = self.mb_step.repeat(B)[start], self.mb_rank.repeat(B)[start]
        return Plan(self.world, self.steps, sk, rk, w, mb, self.samples, self.policy, True)

    def head(self, steps: int) -> Plan:
        """The first `steps` steps."""
        steps = min(int(steps), self.steps)
        n = int(np.searchsorted(self.mb_step, steps))
        return Plan(
            self.world,
            steps,
            self.mb_step[:n],
            self.mb_rank[:n],
            self.mb_weight[:n],
            self.mb_start[: n + 1],
            self.samples[: self.mb_start[n]],
            self.policy,
            self.packed,
        )

    @staticmethod
    def concat(plans: list[Plan]) -> Plan:
        """Plans one after another (epochs chained): step numbers offset, same world."""
        if not plans:
            raise ValueError("concat needs at least one plan")
        world = plans[0].world
        if any(p.world != world for p in plans):
            raise ValueError(f"plans of different worlds: {sorted({p.world for p in plans})}")
        if len({p.packed for p in plans}) > 1:
            raise ValueError("concat of packed and unpacked plans")
        off_step = np.cumsum([0] + [p.steps for p in plans])
        off_s = np.cumsum([0] + [len(p.samples) for p in plans])
        return Plan(
            world,
            int(off_step[-1]),
            np.concatenate([p.mb_step + o for p, o in zip(plans, off_step)]),
            np.concatenate([p.mb_rank for p in plans]),
            np.concatenate([p.mb_weight for p in plans]),
            np.concatenate([[0]] + [p.mb_start[1:] + o for p, o in zip(plans, off_s)]).astype(
                np.int64
            ),
            np.concatenate([p.samples for p in plans]),
            plans[0].policy,
            plans[0].packed,
        )

    def check(self, tokens, *, max_tokens: float | None = None, epoch: bool = False) -> None:
        """Raise ValueError if an invariant of the module docstring does not hold. With
        `max_tokens`, no micro-batch may hold more tokens; with `epoch`, no sample may repeat."""
        tokens = np.asarray(tokens, np.int64)
        if self.n_micro == 0:
            return
        key = self._key()
        if (np.diff(key) < 0).any():
            raise ValueError("micro-batches are not sorted by (step, rank)")
        if (self.mb_rank < 0).any() or (self.mb_rank >= self.world).any():
            raise ValueError(f"a micro-batch has a rank outside [0, {self.world})")
        if (np.diff(self.mb_start) < 1).any():
            raise ValueError("a micro-batch is empty")
        first = np.repeat(self.samples[self.mb_start[:-1]], np.diff(self.mb_start))
        if not self.packed and (tokens[self.samples] != tokens[first]).any():
            raise ValueError("a micro-batch holds samples of different sequence lengths")
        wsum = np.bincount(self.mb_step, weights=self.mb_weight, minlength=self.steps)
        used = np.bincount(self.mb_step, minlength=self.steps) > 0
        if not np.allclose(wsum[used], 1.0, rtol=1e-9, atol=1e-12):
            bad = int(np.flatnonzero(used & ~np.isclose(wsum, 1.0))[0])
            raise ValueError(f"the weights of step {bad} sum to {wsum[bad]:.6g}, not 1")
        if max_tokens is not None:
            t = self.table(tokens)["tokens"].to_numpy()
            if (t > max_tokens * (1 + 1e-12)).any():
                raise ValueError(
                    f"a micro-batch holds {t.max()} tokens > max_tokens = {max_tokens:g}"
                )
        if epoch and len(np.unique(self.samples)) != len(self.samples):
            raise ValueError("a sample appears twice in one epoch's plan")

    def _k(self, step, rank):
        return np.int64(step) * (self.world + 1) + np.int64(rank)

    def _key(self) -> np.ndarray:
        return self.mb_step * (self.world + 1) + self.mb_rank


@dataclass(frozen=True)
class Packed:
    """A policy whose plans run as varlen packs (Plan.pack under `cap` tokens, the policy's
    memory budget): the registry wraps the rows whose trait `packed` is set. It answers for the
    policy it wraps (name aside), so budgets and planners read through."""

    inner: object
    cap: float
    name: str

    def epoch_plan(self, tokens, world: int, seed: int, epoch: int) -> Plan:
        plan = self.inner.epoch_plan(tokens, world, seed, epoch)
        return replace(plan.pack(tokens, self.cap), policy=self.name)

    def __getattr__(self, key):
        if key.startswith("__") or key == "inner":  # copying and pickling look before init
            raise AttributeError(key)
        return getattr(self.inner, key)


def plan_steps(policy, tokens, world: int, steps: int, seed: int = 0) -> Plan:
    """`steps` steps of `policy` for `world` ranks: epoch plans (seed, epoch 0, 1, ...) chained."""
    if world < 1 or steps < 1:
        raise ValueError(f"world and steps must be >= 1, got world={world}, steps={steps}")
    tokens = np.asarray(tokens, np.int64)
    plans, have, epoch = [], 0, 0
    while have < steps:
        p = policy.epoch_plan(tokens, world, seed, epoch)
        if p.steps == 0:
            raise ValueError(
                f"the corpus ({len(tokens)} samples) gives no full step of {world} ranks "
                f"under {getattr(policy, 'name', policy)!r}"
            )
        plans.append(p)
        have += p.steps
        epoch += 1
    return Plan.concat(plans).head(steps)


def bucket_epoch_plan(
    tokens, batch_size, world: int, seed: int, epoch: int, policy: str = ""
) -> Plan:
    """One epoch of a per-bucket policy (batch_size(S) -> B per distinct length): with a generator
    seeded by (seed, epoch), each bucket is shuffled and cut into batches of its B, the batches are
    shuffled, batch j goes to step j // world, rank j % world (the final incomplete round is
    dropped). The random stream is BucketBatchSampler's, so both give the same batches."""
    from suite.balance.buckets import bucket_members

    S, members, starts = bucket_members(tokens)
    B = np.asarray(batch_size(S), np.int64)
    if (B < 1).any():
        raise ValueError(f"the policy gave batch sizes < 1: {B.min()}")
    rng = np.random.default_rng([seed, epoch])
    parts, sizes = [], []
    for k in range(len(S)):
        idx = rng.permutation(members[starts[k] : starts[k + 1]])
        full, rest = divmod(len(idx), int(B[k]))
        parts.append(idx)
        sizes += [B[k]] * full + ([rest] if rest else [])
    sample = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    size = np.asarray(sizes, np.int64)  # old batch b holds sample[first[b] : first[b] + size[b]]
    n = len(size)
    order = rng.permutation(n)  # position p holds old batch order[p]
    # regroup the samples by new position, each batch's samples in their order (a stable sort by
    # new position, in O(samples)): sample i of old batch b goes to start[pos[b]] + its offset
    first = np.cumsum(size) - size
    start = np.cumsum(size[order]) - size[order]
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    batch = np.repeat(np.arange(n), size)
    out = np.empty_like(sample)
    out[start[pos[batch]] + np.arange(len(sample)) - first[batch]] = sample
    return Plan.from_batches(world, np.repeat(np.arange(n), size[order]), out, policy)
