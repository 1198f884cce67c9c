"""One distributed, deterministic batch sampler over any policy's Plan, torch-compatible by duck typing.

Pass it as `DataLoader(dataset, batch_sampler=sampler)`: `__iter__` yields, step by step, this
rank's sample indices (its micro-batches concatenated; possibly an empty list where the plan gives
the rank nothing), `__len__` is the steps left in the epoch, `set_epoch` reshuffles. No torch
import needed. `micro_batches(step)` gives this rank's micro-batches of that step with their loss
weights (suite.balance.plan.MicroBatch), for gradient accumulation.

Every rank builds the same plan, `policy.epoch_plan(tokens, world_size, seed, epoch)`, with no
communication, and reads its own rank. Every sample is in at most one micro-batch of one rank per
epoch (exactly one for the global policy; bucket policies drop the final incomplete round, fewer
than world_size batches). Resume: `resume(step)` (or load_state_dict) skips the epoch's first
`step` steps.

BucketBatchSampler and GlobalBatchSampler are this sampler for a bucket policy and for the global
policy, under the names and arguments they had.
"""

from __future__ import annotations

import numpy as np


class PlanBatchSampler:
    """Rank `rank`'s steps of `policy`'s epoch plans; deterministic per (seed, epoch)."""

    def __init__(self, tokens, policy, *, rank: int = 0, world_size: int = 1, seed: int = 0):
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        if not hasattr(policy, "epoch_plan"):
            raise TypeError(f"policy {policy!r} has no epoch_plan(tokens, world, seed, epoch)")
        self.tokens = np.asarray(tokens, np.int64)
        self.policy, self.rank, self.world_size, self.seed = policy, rank, world_size, seed
        self.epoch, self.start_step, self._step, self._cache = 0, 0, 0, None

    def plan(self):
        """The current epoch's Plan, every rank (built once per epoch)."""
        if self._cache is None or self._cache[0] != self.epoch:
            p = self.policy.epoch_plan(self.tokens, self.world_size, self.seed, self.epoch)
            self._cache = (self.epoch, p)
        return self._cache[1]

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle for `epoch` and start it from its first step."""
        self.epoch, self.start_step, self._step = int(epoch), 0, 0

    def resume(self, step: int) -> None:
        """Skip the current epoch's first `step` steps."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        self.start_step = self._step = int(step)

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "step": self._step, "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        if state.get("seed", self.seed) != self.seed:
            raise ValueError(f"state was saved with seed {state['seed']}, sampler has {self.seed}")
        self.set_epoch(state["epoch"])
        self.resume(state["step"])

    def micro_batches(self, step: int):
        """This rank's micro-batches (indices, weight) at `step` of the current epoch."""
        return self.plan().micro_batches(step, self.rank)

    def __iter__(self):
        plan = self.plan()
        for k in range(self.start_step, plan.steps):
            self._step = k + 1
            yield [int(i) for mb in plan.micro_batches(k, self.rank) for i in mb.indices]

    def __len__(self) -> int:
        """Steps left in the epoch (all of them unless resumed)."""
        return max(0, self.plan().steps - self.start_step)


class BucketBatchSampler(PlanBatchSampler):
    """A bucket policy's plan (batches of one bucket, dealt round-robin to ranks)."""

    def __init__(
        self,
        tokens,
        policy,
        *,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        drop_last: bool = True,
    ) -> None:
        if not drop_last:
            raise ValueError(
                "drop_last=False is not supported: a plan runs whole rounds of world_size "
                "batches (the final incomplete round is dropped)"
            )
        super().__init__(tokens, policy, rank=rank, world_size=world_size, seed=seed)

    def global_batches(self) -> list[np.ndarray]:
        """Every batch of the epoch in global order (batch j: step j // R, rank j % R)."""
        p = self.plan()
        return [p.samples[p.mb_start[i] : p.mb_start[i + 1]] for i in range(p.n_micro)]


def GlobalBatchSampler(  # noqa: N802 - the class name it had
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
) -> PlanBatchSampler:
    """The global policy (planner `cost`, cap `m_mem`) as a PlanBatchSampler."""
    from suite.balance.global_policy import GlobalPolicy

    pol = GlobalPolicy(
        m_mem=float(m_mem),
        planner=cost,
        samples_per_rank=samples_per_rank,
        max_defer=max_defer,
        defer_above=defer_above,
    )
    return PlanBatchSampler(tokens, pol, rank=rank, world_size=world_size, seed=seed)
