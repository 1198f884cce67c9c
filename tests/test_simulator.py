import numpy as np
import pandas as pd
import pytest

from suite.balance.costmodel import CostModel
from suite.balance.plan import Plan, plan_steps
from suite.balance.policies import EqualToken
from suite.balance.simulator import (
    LatencyTable,
    SimConfig,
    draw_corpus,
    simulate,
    simulate_plan,
)


def _buckets(S, share):
    return pd.DataFrame({"S": S, "share": share})


def test_single_bucket_no_noise_hand_computed():
    cost = CostModel(a=1.0, b=1e-3, p=1.0)
    pol = EqualToken(m_tok=400)  # S=100 -> B=4 -> compute 1 + 1e-3*4*100 = 1.4 s
    r = simulate(
        _buckets([100], [1.0]),
        pol,
        cost,
        SimConfig(ranks=4, steps=10, noise_cv=0, collective_s=0.1, optimizer_s=0.5),
    )
    m = r.metrics()
    assert np.allclose(r.compute, 1.4) and np.allclose(r.step_s, 2.0)
    assert m["rank_cv"] == 0 and m["maxmean"] == 1 and m["bubble"] == 0 and m["step_cv"] == 0
    assert m["throughput"] == pytest.approx(4 * 400 / 2.0)
    assert m["floor_p5"] == pytest.approx(800)


def test_two_buckets_two_ranks_expected_metrics():
    # B = 1 for both buckets, equal shares: each rank draws S=1 (1 s) or S=2 (3 s) w.p. 1/2.
    table = LatencyTable(pd.DataFrame({"B": [1, 1], "S": [1, 2], "step_s": [1.0, 3.0]}))
    pol = EqualToken(m_tok=1)
    r = simulate(
        _buckets([1, 2], [0.5, 0.5]),
        pol,
        table,
        SimConfig(ranks=2, steps=40_000, noise_cv=0, seed=1),
    )
    m = r.metrics()
    # mixed steps (p = 1/2): times (1, 3): cv = 1/2, max/mean = 1.5, bubble = 1/3
    assert m["rank_cv"] == pytest.approx(0.25, abs=0.01)
    assert m["maxmean"] == pytest.approx(1.25, abs=0.01)
    assert m["bubble"] == pytest.approx(1 / 6, abs=0.01)
    # step time is 1 w.p. 1/4, else 3: mean 2.5, std sqrt(0.75)
    assert m["step_cv"] == pytest.approx(np.sqrt(0.75) / 2.5, abs=0.01)
    assert set(np.unique(r.step_s)) == {1.0, 3.0}


def test_bucket_draw_probability_is_share_over_b():
    cost = CostModel(a=0.0, b=1.0, p=1.0)
    pol = EqualToken(m_tok=40)  # S=10 -> B=4, S=40 -> B=1
    r = simulate(
        _buckets([10, 40], [0.8, 0.2]), pol, cost, SimConfig(ranks=8, steps=20_000, noise_cv=0)
    )
    # batch weights 0.8/4 = 0.2 and 0.2/1 = 0.2: half the batches each
    assert (r.S == 10).mean() == pytest.approx(0.5, abs=0.01)


def test_noise_is_mean_one_with_cv_over_sqrt_b():
    cost = CostModel(a=0.5, b=1.0, p=1.0)
    pol = EqualToken(m_tok=16)  # S = 4, B = 4: variable part 16 s
    r = simulate(_buckets([4], [1.0]), pol, cost, SimConfig(ranks=100, steps=1000, noise_cv=0.2))
    var = r.compute - 0.5
    assert var.mean() == pytest.approx(16, rel=0.01)
    assert var.std() / var.mean() == pytest.approx(0.2 / 2, rel=0.03)


def test_deterministic_and_frames():
    cost = CostModel(a=0.1, b=1e-6, p=1.5)
    b = _buckets([1560, 32760, 75600], [0.5, 0.3, 0.2])
    cfg = SimConfig(ranks=3, steps=5, seed=4)
    r1, r2 = simulate(b, EqualToken(80_000), cost, cfg), simulate(b, EqualToken(80_000), cost, cfg)
    assert np.array_equal(r1.compute, r2.compute)
    rf, sf = r1.rank_frame(), r1.step_frame()
    assert len(rf) == 15 and len(sf) == 5
    assert (rf.groupby("step")["tokens"].sum().to_numpy() == sf["tokens"].to_numpy()).all()


def test_latency_table_missing_shape_is_named():
    t = LatencyTable(pd.DataFrame({"B": [1], "S": [10], "step_s": [1.0]}))
    with pytest.raises(KeyError, match="B=2, S=10"):
        t.predict([1, 2], [10, 10])


def test_config_validation():
    with pytest.raises(ValueError, match="ranks and steps"):
        SimConfig(ranks=0)


def test_s_cross_tuned_on_another_step_model_keeps_the_policy_exponent():
    """Training tunes the dual rule's s_cross (its exponent p from the power law) on the quadratic
    step model, which predicts measured steps best (lab/dual_gap.py: on the full H200
    reference the power law chose s_cross 28800, +4% measured; the quadratic 9360, +14% in
    simulation). Every candidate is the rule B*S^p <= M_comp with the given p, simulated with
    the given step model."""
    from suite.balance.costmodel import QuadraticCost
    from suite.balance.policies import DualConstraint
    from suite.balance.simulator import tune_s_cross

    S = np.array([1560, 3600, 7800, 14040, 28800, 50400, 75600])
    buckets = _buckets(S, np.full(len(S), 1 / len(S)))
    quad = QuadraticCost(a=0.002, c=2e-4, b=2.2e-6, d=8e-11)  # attention = linear at S = 27.5k
    with pytest.raises(AttributeError):
        tune_s_cross(buckets, quad, 2e5)  # no exponent to take from a quadratic model
    best, table = tune_s_cross(buckets, quad, 2e5, steps=200, p=1.3)
    assert best == table.loc[table.throughput.idxmax(), "s_cross"] and len(table) > 3
    for s_cross, tput in table[["s_cross", "throughput"]].itertuples(index=False):
        pol = DualConstraint(m_mem=2e5, m_comp=2e5 * s_cross**0.3, p=1.3)
        cfg = SimConfig(ranks=16, steps=200, seed=10_007)
        # exact: the grid's one shared draw gives each candidate the corpus simulate() draws
        assert simulate(buckets, pol, quad, cfg).metrics()["throughput"] == tput
    # another exponent is another rule: other batch sizes, other throughputs
    _, other = tune_s_cross(buckets, quad, 2e5, steps=200, p=2.0)
    assert not np.allclose(other.throughput, table.throughput)


def test_simulate_plan_hand_built_plan_hand_computed_steps():
    """Two ranks, two steps; micro-batch cost a + b*B*S: rank compute is the sum of its
    micro-batches, the step the max over ranks + collective + optimizer; an idle rank is 0."""
    tok = np.array([10, 10, 10, 20, 20, 30])
    plan = Plan.from_micro_batches(
        2,
        [[[[0, 1], [3]], [[5]]], [[[2]], []]],  # step 0: rank 0 runs (0, 1) then (3); rank 1 (5)
        [[[0.25, 0.25], [0.5]], [[1.0], []]],
    )
    cost = CostModel(a=1.0, b=0.1, p=1.0)
    cfg = SimConfig(ranks=2, steps=2, noise_cv=0, collective_s=0.5, optimizer_s=0.25)
    r = simulate_plan(plan, tok, cost, cfg)
    # rank 0, step 0: (1 + 0.1*2*10) + (1 + 0.1*20) = 3 + 3; rank 1: 1 + 0.1*30 = 4
    assert np.allclose(r.compute, [[6.0, 4.0], [2.0, 0.0]])
    assert np.allclose(r.step_s, [6.75, 2.75])
    assert r.B.tolist() == [[3, 1], [1, 0]] and r.tokens.tolist() == [[40, 30], [10, 0]]
    assert r.S.tolist() == [[0, 30], [10, 0]]  # 0: a rank of mixed lengths, or idle
    m = r.metrics()
    assert m["maxmean"] == pytest.approx(np.mean([6 / 5, 2 / 1]))
    assert m["maxmean_p99"] == pytest.approx(np.percentile([1.2, 2.0], 99))
    assert m["throughput"] == pytest.approx(80 / 9.5)


def test_latency_table_fallback_for_unmeasured_shapes():
    fb = CostModel(a=0.5, b=1.0, p=1.0)
    t = LatencyTable(pd.DataFrame({"B": [1, 1], "S": [10, 10], "step_s": [2.0, 4.0]}), fb)
    assert t.predict([1, 2], [10, 10]).tolist() == [3.0, 20.5] and t.fixed_s == 0.5


def _policies():
    from suite.balance.costmodel import default_cost_model
    from suite.balance.global_policy import GlobalPolicy
    from suite.balance.policies import DualConstraint

    c = default_cost_model()
    return c, [
        EqualToken(c.m_mem),
        DualConstraint(c.m_mem, c.m_mem * 20_000 ** (c.p - 1), c.p),
        GlobalPolicy(c.m_mem, planner=c),
    ]


@pytest.mark.parametrize("k", [0, 1, 2])
def test_every_policy_goes_through_plan_steps_and_simulate_plan(k):
    """simulate = simulate_plan(plan_steps(...)) for each policy, over the corpus drawn from the
    bucket table by the seed alone (the same samples for every policy)."""
    from suite.balance.simulator import corpus_size, samples_per_rank_step

    cost, pols = _policies()
    pol = pols[k]
    b = _buckets([1560, 7800, 32760, 75600], [0.4, 0.3, 0.2, 0.1])
    cfg = SimConfig(ranks=8, steps=60, seed=5)
    r = simulate(b, pol, cost, cfg)
    tok = draw_corpus(b, corpus_size(b, cfg, samples_per_rank_step(pol, b)), 5)
    ref = simulate_plan(plan_steps(pol, tok, 8, 60, seed=5), tok, cost, cfg)
    assert np.array_equal(r.compute, ref.compute) and np.array_equal(r.step_s, ref.step_s)
    assert r.policy == pol.name and r.metrics()["planner_ms"] > 0
    again = simulate(b, pol, cost, cfg)
    assert np.array_equal(again.compute, r.compute)  # deterministic per seed
    other = simulate(b, pol, cost, SimConfig(ranks=8, steps=60, seed=6))
    assert not np.array_equal(other.compute, r.compute)


def test_corpus_draw_is_the_seeds_alone():
    b = _buckets([1, 2, 3], [0.2, 0.3, 0.5])
    x, y = draw_corpus(b, 50_000, 3), draw_corpus(b, 50_000, 3)
    assert np.array_equal(x, y) and not np.array_equal(x, draw_corpus(b, 50_000, 4))
    assert np.bincount(x, minlength=4)[1:] / 50_000 == pytest.approx([0.2, 0.3, 0.5], abs=0.01)
    assert np.array_equal(draw_corpus(b, 100, 3), x[:100])  # a longer draw extends a shorter


def test_metrics_p99_over_steps():
    c = np.ones((200, 4))
    c[:3, 0] = 3.0  # three steps of 200 with one slow rank: max/mean 2 there, 1 elsewhere
    from suite.balance.simulator import SimResult

    z = np.zeros_like(c, dtype=np.int64)
    m = SimResult("x", 4, z, z + 1, z + 1, c, c.max(axis=1)).metrics()
    assert m["maxmean"] == pytest.approx(1 + 3 / 200)
    assert m["maxmean_p99"] == pytest.approx(np.percentile([2.0] * 3 + [1.0] * 197, 99))
    assert m["rank_cv_p99"] > m["rank_cv"] > 0


def test_a_varlen_pack_pays_one_fixed_cost_and_each_samples_own_work():
    """The same plan packed: rank 0's (0, 1) + (3) become one pack of mixed lengths costing
    a + b*(10 + 10 + 20) once, not a twice; the physical form's floor and per-sample terms
    apply per pack and per sample; a one-length pack costs predict(B, S)."""
    from suite.balance.costmodel import QuadraticCost
    from suite.balance.simulator import micro_batch_seconds

    tok = np.array([10, 10, 10, 20, 20, 30])
    plan = Plan.from_micro_batches(
        2, [[[[0, 1], [3]], [[5]]], [[[2]], []]], [[[0.25, 0.25], [0.5]], [[1.0], []]]
    ).pack(tok, 1000)
    assert plan.n_micro == 3 and plan.lengths(tok)[1].tolist() == [0, 30, 10]
    cost = CostModel(a=1.0, b=0.1, p=1.0)
    r = simulate_plan(plan, tok, cost, SimConfig(ranks=2, steps=2, noise_cv=0))
    assert np.allclose(r.compute, [[1 + 0.1 * 40, 4.0], [2.0, 0.0]])
    assert r.tokens.tolist() == [[40, 30], [10, 0]] and r.S.tolist() == [[0, 30], [10, 0]]
    quad = QuadraticCost(a=1.0, c=0.5, b=0.1, d=0.01, floor_s=3.8)
    got = micro_batch_seconds(plan, tok, quad)
    mixed = 1.0 + 3 * 0.5 + 0.1 * 40 + 0.01 * (100 + 100 + 400)
    assert got.tolist() == pytest.approx([mixed, quad.predict(1, 30)[()], 3.8])
    # a power law's pack: a + b * sum S_i^p
    pl = CostModel(a=0.5, b=0.01, p=1.5)
    assert micro_batch_seconds(plan, tok, pl)[0] == pytest.approx(
        0.5 + 0.01 * (2 * 10**1.5 + 20**1.5)
    )


def test_a_latency_table_prices_a_pack_by_its_fallback_or_says_it_cannot():
    from suite.balance.simulator import micro_batch_seconds

    tok = np.array([10, 20])
    plan = Plan.from_micro_batches(1, [[[[0], [1]]]], [[[1 / 3, 2 / 3]]]).pack(tok, 100)
    table = pd.DataFrame({"B": [1], "S": [10], "step_s": [9.0]})
    fb = CostModel(a=1.0, b=0.1, p=1.0)
    assert micro_batch_seconds(plan, tok, LatencyTable(table, fb)).tolist() == [pytest.approx(4.0)]
    with pytest.raises(KeyError, match="cannot price a varlen pack"):
        micro_batch_seconds(plan, tok, LatencyTable(table))
