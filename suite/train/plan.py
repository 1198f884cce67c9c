"""Budgets and policies of a training run: one table from a policy's name to the policy object.

Every policy is an object with `epoch_plan` (suite.balance.plan); `training_plan` chains its epochs
into the run's Plan, which the real trainer, the one-GPU emulator and the real-rank runs all
execute with suite.train.step.train_step. Same corpus, seed, policy and world: same plan,
whatever the launcher. A new policy is one entry of POLICIES.

Budgets: equal-token uses M_tok = M_mem (the same memory cap, the foundation's fair-comparison
rule); dual-constraint uses (M_mem, M_comp, p), taken from a cost JSON or given explicitly; the
global policy packs micro-batches of <= M_mem tokens, planned with the run's cost model (a user's
fit; without one, b * S^p with a = 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from suite.balance.global_policy import GlobalPolicy
from suite.balance.plan import Plan, plan_steps
from suite.balance.policies import DualConstraint, EqualToken


@dataclass(frozen=True)
class Budgets:
    m_mem: float  # tokens per batch (also the equal-token M_tok)
    m_comp: float  # B * S^p budget
    p: float
    source: str = ""


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


def default_planner(p: float):
    """The global policy's planner without a fitted cost model: b * S^p with a = 0, b = 1."""
    from suite.balance.costmodel import CostModel

    return CostModel(a=0.0, b=1.0, p=float(p), source="b*S^p, a=0 (no cost model)")


# name -> policy(budgets, cost model or None)
POLICIES = {
    "equal-token": lambda b, cost: EqualToken(m_tok=b.m_mem),
    "dual": lambda b, cost: DualConstraint(m_mem=b.m_mem, m_comp=b.m_comp, p=b.p),
    "global": lambda b, cost: GlobalPolicy(m_mem=b.m_mem, planner=cost or default_planner(b.p)),
}


def make_policy(name: str, budgets: Budgets, cost=None):
    """The policy `name` of POLICIES with these budgets (and the global planner's cost model)."""
    if name not in POLICIES:
        raise ValueError(f"policy must be one of {sorted(POLICIES)}, got {name!r}")
    return POLICIES[name](budgets, cost)


def training_plan(corpus: pd.DataFrame, policy, world: int, steps: int, seed: int = 0) -> Plan:
    """`steps` steps of `policy` for `world` ranks over the corpus (epochs chained)."""
    return plan_steps(policy, corpus.tokens.to_numpy(), world, steps, seed)
