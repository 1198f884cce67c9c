"""The batch plan: which samples each rank trains on at each step, under a batching policy.

Both the real trainer and the one-GPU emulator use the same plan, built with the foundation's
BucketBatchSampler (batches of one bucket, dealt round-robin: rank r of R takes global batches
r, r + R, ...), so step k of an R-rank run trains on global batches k*R .. k*R + R - 1. Same corpus,
seed and policy: same plan, whatever the launcher.

Budgets: equal-token uses M_tok = M_mem (the same memory cap, the foundation's fair-comparison
rule); dual-constraint uses (M_mem, M_comp, p), taken from a cost JSON or given explicitly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from suite.balance.policies import make_policy
from suite.balance.sampler import BucketBatchSampler


@dataclass(frozen=True)
class Budgets:
    m_mem: float  # tokens per batch (also the equal-token M_tok)
    m_comp: float  # B * S^p budget
    p: float
    source: str = ""

    def policy(self, name: str):
        return make_policy(name, m_mem=self.m_mem, m_comp=self.m_comp, p=self.p)


def budgets_for(
    corpus: pd.DataFrame,
    *,
    cost_json: str | None = None,
    m_mem: float | None = None,
    m_comp: float | None = None,
    p: float | None = None,
    s_cross: float | None = None,
) -> Budgets:
    """Budgets from a cost JSON (suite.balance CostModel) with explicit values overriding it.

    Defaults without a JSON: M_mem = the corpus's longest sample, p = 2, crossover at the median S.
    """
    src = []
    if cost_json:
        from suite.balance.costmodel import CostModel

        cm = CostModel.load(cost_json)
        p = cm.p if p is None else p
        m_mem = cm.m_mem if m_mem is None and math.isfinite(cm.m_mem) else m_mem
        m_comp = cm.m_comp if m_comp is None and math.isfinite(cm.m_comp) else m_comp
        s_cross = cm.s_cross if s_cross is None and math.isfinite(cm.s_cross) else s_cross
        src.append(f"cost {cost_json}")
    smax = float(corpus.tokens.max())
    m_mem = smax if m_mem is None else float(m_mem)
    p = 2.0 if p is None else float(p)
    if m_comp is None:
        s_cross = float(np.median(corpus.tokens)) if s_cross is None else float(s_cross)
        m_comp = m_mem * s_cross ** (p - 1)
    if m_mem <= 0 or m_comp <= 0:
        raise ValueError(f"budgets must be positive, got M_mem={m_mem}, M_comp={m_comp}")
    return Budgets(float(m_mem), float(m_comp), p, "; ".join(src) or "defaults")


def make_plan(
    corpus: pd.DataFrame, policy, world: int, steps: int, seed: int = 0
) -> list[list[list[int]]]:
    """plan[step][rank] = the sample indices of that rank's batch (epochs chained as needed)."""
    out: list[list[int]] = []
    epoch = 0
    sampler = BucketBatchSampler(
        corpus.tokens.to_numpy(), policy, world_size=world, seed=seed, drop_last=True
    )
    while len(out) < steps * world:
        sampler.set_epoch(epoch)
        batches = sampler.global_batches()
        if not batches:
            raise ValueError(
                f"the corpus ({len(corpus)} samples) gives no full round of {world} batches"
            )
        out += [b.tolist() for b in batches]
        epoch += 1
    return [out[k * world : (k + 1) * world] for k in range(steps)]
