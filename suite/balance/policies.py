"""Batch-size policies: which batch size B each bucket of sequence length S gets.

- equal-token: B = max(1, floor(M_tok / S)), the usual B x S = constant rule.
- dual-constraint (AdaptiveLoad): B = max(1, min(floor(M_mem / S), floor(M_comp / S^p))), so both
  the memory budget B*S <= M_mem and the compute budget B*S^p <= M_comp hold whenever B > 1.

Budgets are data: they come from a fitted cost model (suite.balance.costmodel.derive_budgets), never
hand-tuned. Fair comparison: equal-token gets M_tok = M_mem, the same memory cap as dual-constraint.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _floor_div(budget: float, denom: np.ndarray) -> np.ndarray:
    # a tiny relative slack so that e.g. 75600/75600 is not floored to 0 by round-off
    return np.floor(budget / denom * (1 + 1e-12)).astype(np.int64)


class _BucketPolicy:
    """A policy that fixes B per bucket: its plan is the bucket sampler's (suite.balance.plan)."""

    def epoch_plan(self, tokens, world: int, seed: int, epoch: int):
        from suite.balance.plan import bucket_epoch_plan

        return bucket_epoch_plan(tokens, self.batch_size, world, seed, epoch, self.name)


@dataclass(frozen=True)
class EqualToken(_BucketPolicy):
    """B = max(1, floor(m_tok / S))."""

    m_tok: float
    name: str = "equal-token"

    def batch_size(self, S) -> np.ndarray:
        S = np.asarray(S, dtype=float)
        return np.maximum(1, _floor_div(self.m_tok, S))


@dataclass(frozen=True)
class DualConstraint(_BucketPolicy):
    """B = max(1, min(floor(m_mem / S), floor(m_comp / S^p)))."""

    m_mem: float
    m_comp: float
    p: float
    name: str = "dual"

    def batch_size(self, S) -> np.ndarray:
        S = np.asarray(S, dtype=float)
        return np.maximum(
            1, np.minimum(_floor_div(self.m_mem, S), _floor_div(self.m_comp, S**self.p))
        )


def m_comp_for_crossover(m_mem: float, p: float, s_cross: float) -> float:
    """The compute budget at which the two constraints cross at S = s_cross.

    Shorter sequences are then memory-bound, longer ones compute-bound:
    M_comp = M_mem * s_cross^(p - 1).
    """
    return float(m_mem * s_cross ** (p - 1))


def crossover_for_m_comp(m_mem: float, p: float, m_comp: float) -> float:
    """The inverse of m_comp_for_crossover: the length s_cross at which M_comp = M_mem *
    s_cross^(p - 1) (undefined at p = 1: ValueError)."""
    if p == 1:
        raise ValueError("at p = 1 the constraints are parallel: no crossover length")
    return float((m_comp / m_mem) ** (1 / (p - 1)))
