"""The one policy table (suite.balance.registry): every row from both kinds of inputs, and the
Plan invariants of every policy it builds."""

import math

import numpy as np
import pytest

from suite.balance.buckets import bucket_table
from suite.balance.costmodel import default_cost_model
from suite.balance.registry import (
    OWN,
    PEERS,
    POLICIES,
    Budgets,
    PolicyInputs,
    default_planner,
    make_policy,
)
from suite.data.corpus import sample_corpus

COST = default_cost_model()
TOK = sample_corpus(3000, seed=2).tokens.to_numpy()
W = 4


def _cost_side(name):
    return make_policy(name, PolicyInputs.from_cost(COST, bucket_table(TOK)))


def _budget_side(name, cost=None):
    b = Budgets(m_mem=float(TOK.max()) * 2, m_comp=float(TOK.max()) * 2 * 900, p=2.0)
    return make_policy(name, PolicyInputs.from_budgets(b, TOK, cost))


def test_one_table_holds_the_own_and_the_peer_policies():
    assert list(POLICIES) == [*OWN, *PEERS] and len(set(POLICIES)) == len(POLICIES)
    assert {"bucket-sync", "opensora-searched", "videosys-profiled", "pack-trim-5pct"} <= set(PEERS)


@pytest.mark.parametrize("name", list(POLICIES))
@pytest.mark.parametrize("side", ["cost", "budgets", "budgets+cost"])
def test_every_row_from_both_inputs_plans_every_sample_once(name, side):
    pol = {
        "cost": lambda: _cost_side(name),
        "budgets": lambda: _budget_side(name),
        "budgets+cost": lambda: _budget_side(name, COST),
    }[side]()
    assert pol.name == name
    m_mem = COST.m_mem if side == "cost" else float(TOK.max()) * 2
    plan = pol.epoch_plan(TOK, W, 3, 0)
    plan.check(TOK, max_tokens=m_mem, epoch=True)  # each sample at most once, cap held
    assert plan.steps > 0 and plan.world == W and plan.policy == name
    ran = np.sort(plan.samples)
    assert len(np.unique(ran)) == len(ran) and len(ran) >= 0.5 * len(TOK)
    again = pol.epoch_plan(TOK, W, 3, 0)  # deterministic per seed
    assert np.array_equal(again.samples, plan.samples)
    assert np.array_equal(again.mb_weight, plan.mb_weight)
    other = pol.epoch_plan(TOK, W, 4, 0)
    assert not np.array_equal(other.samples[:100], plan.samples[:100])


def test_unknown_name_lists_the_accepted_ones():
    with pytest.raises(ValueError) as e:
        make_policy("lpt", PolicyInputs.from_cost(COST, TOK))
    msg = str(e.value)
    assert "unknown policy 'lpt'" in msg and all(n in msg for n in POLICIES)


def test_make_policy_names_the_inputs_it_needs():
    with pytest.raises(TypeError, match="PolicyInputs"):
        make_policy("dual", COST)


def test_the_same_budgets_give_the_same_policy_on_both_sides():
    """from_cost(cost) and from_budgets(the cost's budgets, cost) build equal policies."""
    side_b = Budgets(COST.m_mem, COST.m_comp if math.isfinite(COST.m_comp) else math.inf, COST.p)
    for name in POLICIES:
        a = make_policy(name, PolicyInputs.from_cost(COST, TOK))
        b = make_policy(name, PolicyInputs.from_budgets(side_b, TOK, COST))
        assert np.array_equal(
            a.epoch_plan(TOK, W, 0, 0).samples, b.epoch_plan(TOK, W, 0, 0).samples
        )


def test_dual_tunes_m_comp_where_the_budgets_leave_it_unset():
    inputs = PolicyInputs.from_budgets(Budgets(COST.m_mem, math.inf, COST.p), TOK, COST)
    dual = make_policy("dual", inputs)
    assert math.isfinite(dual.m_comp) and dual.m_comp > 0


def test_a_sample_over_the_cap_is_refused_with_the_policy_named():
    small = Budgets(m_mem=float(TOK.max()) - 1)
    for name in ("global", "bucket-sync", "pack-lpt-fitted"):
        with pytest.raises(ValueError, match=f"{name}: a sample of {TOK.max()} tokens exceeds"):
            make_policy(name, PolicyInputs.from_budgets(small, TOK))


def test_bad_budgets_name_the_argument():
    with pytest.raises(ValueError, match="M_mem must be a finite number > 0, got 0"):
        Budgets(m_mem=0)
    with pytest.raises(ValueError, match="M_comp must be > 0"):
        Budgets(m_mem=10, m_comp=-1)


def test_without_a_cost_model_the_planner_is_b_s_to_the_p():
    inputs = PolicyInputs.from_budgets(Budgets(1e5, p=1.7), TOK)
    assert inputs.cost == default_planner(1.7) and inputs.cost.a == 0


def test_the_trainer_accepts_and_lists_every_registry_name():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "suite.train", "--help"], capture_output=True, text=True, check=True
    ).stdout
    choices = out[out.index("--policy {") + len("--policy {") :].split("}")[0].split(",")
    assert choices == list(POLICIES)
