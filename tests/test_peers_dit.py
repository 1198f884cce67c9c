"""KnapFormer's compute bags and LoongForge's fitted rank cost (suite.balance.peers_dit): their
Plan invariants, the bag balance on cases with a known answer, and their fits recovering known
coefficients."""

import numpy as np
import pandas as pd
import pytest

from suite.balance.buckets import bucket_table
from suite.balance.costmodel import CostModel, QuadraticCost, default_cost_model
from suite.balance.global_policy import greedy_partition
from suite.balance.peers_dit import (
    GAMMA_SWEEP,
    FittedRankCost,
    KnapFormerBags,
    fit_gamma,
    fit_rank_cost,
    knapformer_bags,
    softmax_max,
    step_windows,
    warmup_groups,
)
from suite.balance.registry import PolicyInputs, make_policy
from suite.data.corpus import sample_corpus

TOK = sample_corpus(4000, seed=5).tokens.to_numpy()
COST = default_cost_model()
NAMES = ("knapformer", "loongforge")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("world", [1, 4, 16])
def test_every_sample_once_under_the_cap_and_weights_sum_to_one(name, world):
    pol = make_policy(name, PolicyInputs.from_cost(COST, bucket_table(TOK)))
    plan = pol.epoch_plan(TOK, world, seed=1, epoch=0)
    plan.check(TOK, max_tokens=COST.m_mem, epoch=True)  # one length per batch, cap, weights
    assert np.array_equal(np.sort(plan.samples), np.arange(len(TOK)))  # all, exactly once
    wsum = np.bincount(plan.mb_step, weights=plan.mb_weight, minlength=plan.steps)
    assert np.allclose(wsum, 1.0) and plan.policy == name
    step_tokens = np.bincount(plan.mb_step, weights=plan.table(TOK)["tokens"], minlength=plan.steps)
    assert step_tokens.max() <= world * COST.m_mem  # a step is at most world * M_mem tokens
    again = pol.epoch_plan(TOK, world, seed=1, epoch=0)
    assert np.array_equal(again.samples, plan.samples)
    assert not np.array_equal(pol.epoch_plan(TOK, world, 1, 1).samples, plan.samples)


def test_greedy_is_largest_first_into_the_least_loaded_bag():
    owner, loads = greedy_partition([8, 7, 6, 5, 4], 3)  # 8|7|6, then 5 -> 6's, 4 -> 7's
    assert loads.tolist() == [8, 11, 11] and owner.tolist() == [0, 1, 2, 2, 1]
    owner, loads = greedy_partition([2, 4, 3, 2, 4, 3], 3)  # a perfect split: LPT finds it
    assert loads.tolist() == [6, 6, 6]
    assert sorted(np.bincount(owner)) == [2, 2, 2]
    _, loads = greedy_partition([5.0], 4)  # more bags than items: the others stay empty
    assert sorted(loads.tolist()) == [0, 0, 0, 5]
    _, occupancy = knapformer_bags([8, 7, 6, 5, 4], 3)  # occupancy: load / (total / bags)
    assert occupancy * 10 == pytest.approx([8, 11, 11])


def test_knapformer_bags_balance_its_own_cost_to_under_one_percent():
    """The paper's < 1% per-GPU workload difference, on its own cost, with many small items."""
    pol = KnapFormerBags(m_mem=COST.m_mem, gamma=1.5)
    rng = np.random.default_rng(0)
    S = rng.choice([1560, 3600, 7800, 14040], size=4000)
    _, loads = knapformer_bags(pol.sample_cost(S), 16)
    assert loads.max() / loads.min() - 1 < 0.01


def test_knapformer_gamma_is_recovered_from_a_sweep_of_its_own_form():
    d, gamma, kappa = 5120, 2.5, 3e-15
    S = np.array([1560, 3600, 7800, 14040, 32760, 75600], float)
    t = kappa * (24 * S * d**2 + gamma * 4 * S**2 * d)
    assert fit_gamma(S, t, d) == pytest.approx(gamma, rel=1e-6)
    assert fit_gamma(np.array([1560.0]), t[:1], d) == 1.0  # one length: FLOPs as counted


def test_knapformer_fits_gamma_on_the_quadratic_step_model():
    """From a step model b*S + d*S^2 with nothing fixed, timed at KnapFormer's sweep lengths:
    gamma = 6 * width * d / b."""
    q = QuadraticCost(a=0.0, c=0.0, b=3e-5, d=1.5e-9)
    cost = COST.with_quadratic(q)
    assert q.predict(1, GAMMA_SWEEP) == pytest.approx(
        3e-5 * GAMMA_SWEEP + 1.5e-9 * GAMMA_SWEEP**2.0
    )
    pol = KnapFormerBags.fit(cost, bucket_table(TOK), COST.m_mem)
    assert pol.gamma == pytest.approx(6 * 5120 * 1.5e-9 / 3e-5, rel=1e-6)


def test_loongforge_coefficients_are_recovered_from_synthetic_warmup_data():
    """Iteration times that are the slowest rank's x*sum L^2 + y*sum L + z*count (in ms): the
    softmax-max fit gives x, y, z back."""
    rng = np.random.default_rng(3)
    n = rng.integers(1, 40, (9, 8)).astype(float)
    s1 = n * rng.uniform(2e3, 5e4, (9, 8))
    s2 = s1 * rng.uniform(2e3, 7e4, (9, 8))
    x, y, z = 1.6e-6, 2.7e-2, 8e-1
    times = (x * s2 + y * s1 + z * n).max(axis=1)
    got = fit_rank_cost(np.stack([s2, s1, n], axis=-1), times)
    assert got == pytest.approx((x, y, z), rel=1e-3)
    assert softmax_max([1.0, 3.0]) == pytest.approx(3.0, abs=1e-8)  # alpha = 20: nearly max


class _PerSample:
    """A step model that is exactly LoongForge's form: a batch of B samples of S tokens costs
    B * (x*S^2 + y*S + z), nothing fixed."""

    def __init__(self, x, y, z):
        self.x, self.y, self.z, self.fixed_s = x, y, z, 0.0

    def predict(self, B, S):
        S = np.asarray(S, float)
        return np.asarray(B, float) * (self.x * S**2 + self.y * S + self.z)


def test_loongforge_fit_on_warmup_iterations_recovers_the_step_models_coefficients():
    truth = _PerSample(1.5e-9, 3e-5, 7e-4)
    buckets = bucket_table(TOK)
    groups, ms = warmup_groups(truth, buckets, COST.m_mem)
    assert groups.shape == (9, 8, 3) and (groups[..., 1] <= 1.2 * COST.m_mem).all()
    pol = FittedRankCost.fit(truth, buckets, COST.m_mem)  # in ms, as LoongForge times
    assert (pol.x, pol.y, pol.z) == pytest.approx((1.5e-6, 3e-2, 7e-1), rel=1e-4)


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="gamma must be a finite number >= 0, got -1"):
        KnapFormerBags(m_mem=1e5, gamma=-1)
    with pytest.raises(ValueError, match=r"x, y, z must be >= 0 and not all 0, got \(0, 0, 0\)"):
        FittedRankCost(m_mem=1e5, x=0, y=0, z=0)
    with pytest.raises(ValueError, match="a sample of 75600 tokens exceeds M_mem = 1000"):
        KnapFormerBags(m_mem=1000).epoch_plan(np.array([75600]), 2, 0, 0)
    with pytest.raises(ValueError, match="bucket table with columns S and share"):
        warmup_groups(COST, pd.DataFrame({"S": [1]}), 1e5)


def test_step_windows_cut_at_the_budget():
    b = step_windows([3, 3, 3, 5, 9, 1], 6)
    assert b.tolist() == [0, 2, 3, 4, 5, 6]  # 3+3 | 3 | 5 | 9 (alone, over) | 1


def test_a_power_law_cost_fits_both():
    """Without a quadratic form the power law's b * S^p is the measured per-sample cost."""
    cost = CostModel(a=0.1, b=1e-6, p=1.4, m_mem=COST.m_mem)
    k = KnapFormerBags.fit(cost, bucket_table(TOK), cost.m_mem)
    f = FittedRankCost.fit(cost, bucket_table(TOK), cost.m_mem)
    assert 0 < k.gamma < np.inf and f.x + f.y + f.z > 0
