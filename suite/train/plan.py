"""Budgets and the plan of a training run.

The policies are suite.balance.registry's (make_policy(name, PolicyInputs.from_budgets(budgets,
corpus.tokens, cost))); every one has `epoch_plan` (suite.balance.plan) and `training_plan` chains
its epochs into the run's Plan, which the real trainer, the one-GPU emulator and the real-rank
runs all execute with suite.train.step.train_step. Same corpus, seed, policy and world: same
plan, whatever the launcher.

Budgets: equal-token uses M_tok = M_mem (the same memory cap, the foundation's fair-comparison
rule); dual-constraint uses (M_mem, M_comp, p), taken from a cost JSON or given explicitly; the
global policy packs micro-batches of <= M_mem tokens, planned with the run's cost model (a user's
fit; without one, b * S^p with a = 0).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from suite.balance.plan import Plan, plan_steps
from suite.balance.registry import Budgets

__all__ = ["Budgets", "budgets_for", "training_plan"]


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


def training_plan(corpus: pd.DataFrame, policy, world: int, steps: int, seed: int = 0) -> Plan:
    """`steps` steps of `policy` for `world` ranks over the corpus (epochs chained)."""
    return plan_steps(policy, corpus.tokens.to_numpy(), world, steps, seed)
