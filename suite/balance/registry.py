"""The policy registry: every batching policy the suite simulates, plans and recommends, by name.

One row per policy: name -> a constructor from (cost, buckets). `cost` is the user's fitted
suite.balance.costmodel.CostModel (M_mem, the power law's p, M_comp where the JSON has one; its
quadratic step model where it carries one); `buckets` the data's bucket table (S, share), for
policies that tune a budget on the data. A constructor raises ValueError where its policy does
not apply (e.g. a sample longer than the global policy's cap); callers skip it with the reason.
`suite simulate --policy`, `suite forecast` (its recommendation ranks every row) and the balance
experiment read this table: a new policy goes in with one line here.
"""

from __future__ import annotations

import math

import pandas as pd


def _equal_token(cost, buckets: pd.DataFrame):
    from suite.balance.policies import EqualToken

    return EqualToken(m_tok=cost.m_mem)  # the same memory cap as dual: M_tok = M_mem


def _dual(cost, buckets: pd.DataFrame):
    """B*S <= M_mem and B*S^p <= M_comp; without a finite M_comp in the cost, s_cross is tuned
    on `buckets` by simulated throughput with the cost's step model (its quadratic form where it
    has one), keeping the power law's p."""
    from suite.balance.policies import DualConstraint
    from suite.balance.simulator import tune_s_cross

    m_comp = cost.m_comp
    if not math.isfinite(m_comp):
        s_cross, _ = tune_s_cross(buckets, cost.step_model(), cost.m_mem, p=cost.p)
        m_comp = cost.with_budgets(cost.m_mem, s_cross).m_comp
    return DualConstraint(m_mem=cost.m_mem, m_comp=m_comp, p=cost.p)


def _global(cost, buckets: pd.DataFrame):
    from suite.balance.global_policy import GlobalPolicy

    s_max = int(buckets["S"].max())
    if s_max > cost.m_mem:
        raise ValueError(
            f"global: a sample of {s_max} tokens exceeds its model-batch cap M_mem = "
            f"{cost.m_mem:.0f}"
        )
    return GlobalPolicy(m_mem=cost.m_mem, planner=cost)  # the planner predicts with the power law


POLICIES = {
    "equal-token": _equal_token,
    "dual": _dual,
    "global": _global,
}


def make_policy(name: str, cost, buckets: pd.DataFrame):
    """The policy `name` built from (cost, buckets); ValueError names the accepted ones."""
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; accepted: {', '.join(POLICIES)}")
    return POLICIES[name](cost, buckets)


def budgets(policy) -> dict:
    """The budgets a policy carries (for reports): m_mem / m_tok, m_comp, p, where it has them."""
    return {k: getattr(policy, k) for k in ("m_tok", "m_mem", "m_comp", "p") if hasattr(policy, k)}
