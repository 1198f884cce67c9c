"""A distributed, deterministic bucket batch sampler, compatible with torch.utils.data by duck typing.

Pass it as `DataLoader(dataset, batch_sampler=sampler)`: `__iter__` yields lists of indices, `__len__`
is this rank's number of batches, `set_epoch` reshuffles. No torch import needed.

Each epoch, with a generator seeded by (seed, epoch) and therefore identical on every rank:
1. each bucket (one sequence length S) is shuffled and cut into batches of the policy's B;
2. the list of all batches is shuffled;
3. rank r takes batches r, r + R, r + 2R, ...
So every sample is in exactly one batch of exactly one rank per epoch. With drop_last=False ranks
may differ by one batch at the end of an epoch (a trainer must then stop at min over ranks or
accept the short round); drop_last=True drops the final incomplete round instead.
Resume: `resume(step)` (or load_state_dict) skips this rank's first `step` batches of the epoch.
"""

from __future__ import annotations

import numpy as np

from suite.balance.buckets import bucket_index


class BucketBatchSampler:
    """Batches of one bucket each, dealt round-robin to ranks; deterministic per (seed, epoch)."""

    def __init__(
        self,
        tokens,
        policy,
        *,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        self.S, self.bucket = bucket_index(tokens)
        self.B = np.asarray(policy.batch_size(self.S), dtype=np.int64)
        if (self.B < 1).any():
            raise ValueError(f"policy gave batch sizes < 1: {self.B.min()}")
        self.rank, self.world_size, self.seed, self.drop_last = rank, world_size, seed, drop_last
        self.epoch, self.start_step, self._step = 0, 0, 0

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle for `epoch` and start it from its first batch."""
        self.epoch, self.start_step, self._step = int(epoch), 0, 0

    def resume(self, step: int) -> None:
        """Skip this rank's first `step` batches of the current epoch."""
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

    def global_batches(self) -> list[np.ndarray]:
        """Every batch of the epoch in global order (before dealing to ranks)."""
        rng = np.random.default_rng([self.seed, self.epoch])
        batches = []
        for k in range(len(self.S)):
            idx = rng.permutation(np.flatnonzero(self.bucket == k))
            batches += np.array_split(idx, np.arange(self.B[k], len(idx), self.B[k]))
        order = rng.permutation(len(batches))
        batches = [batches[i] for i in order]
        if self.drop_last:
            batches = batches[: len(batches) - len(batches) % self.world_size]
        return batches

    def __iter__(self):
        mine = self.global_batches()[self.rank :: self.world_size]
        for i in range(self.start_step, len(mine)):
            self._step = i + 1
            yield mine[i].tolist()

    def __len__(self) -> int:
        """This rank's batches left in the epoch (all of them unless resumed)."""
        n = int(np.sum(-(-np.bincount(self.bucket, minlength=len(self.S)) // self.B)))
        if self.drop_last:
            n -= n % self.world_size
        return max(0, (n - self.rank + self.world_size - 1) // self.world_size - self.start_step)
