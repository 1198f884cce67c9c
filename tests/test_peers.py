"""The peer policies (suite.balance.peers, peers_packing): Plan invariants and each peer's own
published behaviour, with predicted per-rank loads from plan.table and cost.predict."""

import numpy as np
import pytest

from suite.balance.buckets import bucket_table
from suite.balance.costmodel import default_cost_model
from suite.balance.global_policy import greedy_partition, kk_partition, lpt_partition
from suite.balance.peers import (
    ProfiledRescale,
    fitting_batch,
    lengths_of,
    memory_tokens,
    predicted_rank_loads,
    search_batch_sizes,
    videosys_imbalance,
)
from suite.balance.peers_packing import (
    CostAwarePacking,
    flops_linear_coef,
    kk_equal_partition,
    megatron_groups,
    trim_overload,
)
from suite.balance.plan import plan_steps
from suite.balance.registry import PACKERS, PEERS, PolicyInputs, make_policy, trait
from suite.data.corpus import sample_corpus

COST = default_cost_model()
M = COST.m_mem
TOK = sample_corpus(6000, seed=1).tokens.to_numpy()
S_ALL = lengths_of(TOK)
W = 8


def make(name, tokens=TOK):
    return make_policy(name, PolicyInputs.from_cost(COST, tokens))


def allowed_drop(name) -> int:
    """What an epoch may leave out: nothing for the micro-batched (packers, knapformer,
    loongforge); < world per bucket for bucket-sync; the final incomplete round (< world batches
    of at most the largest B) for the dealt ones."""
    if trait(name, "micro_batched"):
        return 0
    if name == "bucket-sync":
        return len(S_ALL) * (W - 1)
    return (W - 1) * int(make(name).batch_size(S_ALL).max())


@pytest.mark.parametrize("name", PEERS)
def test_invariants_every_sample_once_and_memory_cap(name):
    pol = make(name)
    assert pol.name == name
    for epoch in (0, 1):
        plan = pol.epoch_plan(TOK, W, 3, epoch)
        plan.check(TOK, max_tokens=M, epoch=True)
        assert plan.steps > 10 and plan.world == W
        assert 0 <= len(TOK) - len(plan.samples) <= allowed_drop(name)
        assert plan.table(TOK)["tokens"].max() <= M


@pytest.mark.parametrize("name", PEERS)
def test_deterministic_per_seed_and_resumable(name):
    pol = make(name)
    a, b = pol.epoch_plan(TOK, W, 5, 0), pol.epoch_plan(TOK, W, 5, 0)
    assert np.array_equal(a.samples, b.samples) and np.array_equal(a.mb_weight, b.mb_weight)
    assert not np.array_equal(pol.epoch_plan(TOK, W, 6, 0).samples[:200], a.samples[:200])
    assert not np.array_equal(pol.epoch_plan(TOK, W, 5, 1).samples[:200], a.samples[:200])
    k = a.steps + 4  # across the epoch boundary
    long, short = plan_steps(pol, TOK, W, k + 6, seed=5), plan_steps(pol, TOK, W, k, seed=5)
    head = long.head(k)
    for f in ("mb_step", "mb_rank", "mb_weight", "mb_start", "samples"):
        assert np.array_equal(getattr(head, f), getattr(short, f)), f
    nxt = pol.epoch_plan(TOK, W, 5, 1)
    for step in range(k, k + 6):  # a resumed run's later steps are the next epoch's
        assert np.array_equal(long.step_samples(step), nxt.step_samples(step - a.steps))


def test_registry_accepts_a_bucket_table():
    table = bucket_table(TOK)
    for name in PEERS:
        p1, p2 = make(name, table), make(name)
        assert np.array_equal(
            p1.epoch_plan(TOK, W, 0, 0).samples, p2.epoch_plan(TOK, W, 0, 0).samples
        )


# ------------------------------------------------------------------------------------ Open-Sora


def test_batch_search_equalises_step_times_below_the_base():
    B = search_batch_sizes(COST, S_ALL)
    fit = fitting_batch(S_ALL, M)
    base = S_ALL == S_ALL.max()
    assert B[base] == fit[base]  # the base bucket: the largest batch that fits
    t_ref = COST.predict(fit[base], S_ALL[base])[0]
    t, t_up = COST.predict(B, S_ALL), COST.predict(B + 1, S_ALL)
    others = ~base
    assert (t[others] < t_ref).all()  # search_bs.py keeps only step_time < ref_step_time
    capped = B == fit
    # the closest from below: one more sample would reach the base time, unless memory-capped
    assert ((t_up >= t_ref) | capped)[others].all()
    tol = COST.sample_cost(S_ALL)  # so each bucket is within one sample's cost of the base
    assert ((t_ref - t < tol) | capped)[others].all()
    assert (B * S_ALL <= M).all() and capped.any() and (~capped).any()


def test_bucket_sync_ranks_identical_within_a_step():
    plan = make("bucket-sync").epoch_plan(TOK, W, 0, 0)
    t = plan.table(TOK)
    per_step = t.groupby("step").agg(nS=("S", "nunique"), nB=("B", "nunique"), nr=("rank", "size"))
    assert (per_step.nS == 1).all() and (per_step.nB == 1).all() and (per_step.nr == W).all()
    loads = predicted_rank_loads(plan, TOK, COST)
    assert np.allclose(loads.std(axis=1), 0)  # predicted rank CV within a step: 0
    step_t = loads.max(axis=1)
    assert step_t.std() / step_t.mean() > 0.01  # the imbalance moved across steps
    assert np.allclose(videosys_imbalance(plan, TOK, COST), 0)


def test_opensora_searched_deals_different_buckets_per_rank():
    plan = make("opensora-searched").epoch_plan(TOK, W, 0, 0)
    t = plan.table(TOK)
    assert (t.groupby("step")["S"].nunique() > 1).mean() > 0.9  # as its sampler deals batches
    assert (t.groupby("step")["rank"].size() == W).all()


# ------------------------------------------------------------------------------------ VideoSys


def test_videosys_profile_and_rescale_toward_the_median():
    pol = ProfiledRescale.profile(COST, TOK, M)
    b_max = 2 ** np.floor(np.log2(fitting_batch(S_ALL, M))).astype(int)
    assert (b_max * S_ALL <= M).all() and (2 * b_max * S_ALL > M).all()  # doubling until OOM
    t_max = COST.predict(b_max, S_ALL)
    assert pol.median_s == pytest.approx(np.median(t_max))
    B = pol.batch_size(S_ALL)
    slow = t_max > pol.median_s
    assert slow.any() and (~slow).any()
    assert np.array_equal(B[~slow], b_max[~slow])  # faster buckets keep their max batch
    assert np.array_equal(B[slow], np.maximum(1, (b_max * pol.median_s / t_max).astype(int))[slow])
    # VideoSys projects the rescaled time as t * B / B_max (linear in B): at most the median
    assert (t_max * B / b_max <= pol.median_s * (1 + 1e-12))[slow].all()
    t = COST.predict(B, S_ALL)  # with the fixed cost a, the predicted time: above by < a at most
    assert (t <= t_max).all() and (t[slow] < pol.median_s + COST.a).all()


def test_videosys_alloc_fraction_caps_memory():
    mem = memory_tokens(COST, M, 0.70)
    assert mem == pytest.approx((0.70 * COST.capacity_bytes - COST.m0) / COST.m1)
    pol = ProfiledRescale.profile(COST, TOK, M, alloc_fraction=0.70)
    plan = pol.epoch_plan(TOK, W, 0, 0)
    plan.check(TOK, max_tokens=mem, epoch=True)
    assert memory_tokens(COST, M, 1.0) == M  # never above the suite's cap
    with pytest.raises(ValueError, match="alloc_fraction"):
        memory_tokens(COST, M, 1.5)


def test_videosys_imbalance_is_mean_of_max_minus_t_over_max():
    plan = make("videosys-profiled").epoch_plan(TOK, W, 0, 0)
    loads = predicted_rank_loads(plan, TOK, COST)
    top = loads.max(axis=1, keepdims=True)
    expect = ((top - loads) / top).mean(axis=1)
    assert np.allclose(videosys_imbalance(plan, TOK, COST), expect)
    assert expect.mean() > 0


# ------------------------------------------------------------------------------------ packing


@pytest.mark.parametrize("name", PACKERS)
def test_packing_token_weights(name):
    plan = make(name).epoch_plan(TOK, W, 0, 0)
    t = plan.table(TOK)
    assert np.allclose(t["weight"], t["tokens"] / t.groupby("step")["tokens"].transform("sum"))
    assert sorted(plan.samples.tolist()) == list(range(len(TOK)))


def test_flops_cost_is_slimes_quadratic():
    pol = make("pack-kk-flops")
    assert flops_linear_coef(COST) == pytest.approx(24000)
    S = np.array([1560.0, 75600.0])
    assert np.allclose(pol.sample_cost(S), 24000 * S + S**2)


def test_trim_overload_is_megatrons_rule():
    costs = np.array([10.0, 7.0, 2.5, 1.2])
    owner, loads = greedy_partition(costs, 2)  # 10 | 7 + 2.5 + 1.2: slack 0.7 / 10.7 > 5%
    members = [[0], [1, 2, 3]]
    out = trim_overload(costs, owner, loads, members, 0.05)
    assert out == [3] and owner.tolist() == [0, 1, 1, -1]  # slack 0.5 / 10 = 5%: stop
    owner, group, balanced = megatron_groups(costs, 2, 0.05)  # 1.2 runs in the next group
    assert owner.tolist() == [0, 1, 1, 0] and group.tolist() == [0, 0, 0, 1] and not balanced


def test_megatron_stop_holds_whenever_claimed():
    pol = make("pack-trim-5pct")
    steps = pol.epoch_steps(TOK, W, 0, 0)
    plan = pol.epoch_plan(TOK, W, 0, 0)
    claimed = 0
    for k, st in enumerate(steps):
        # the loads of what the plan actually runs, from its samples, not the record
        loads = np.zeros(W)
        for r in range(W):
            for mb in plan.micro_batches(k, r):
                loads[r] += pol.sample_cost(TOK[mb.indices]).sum()
        assert np.allclose(loads, st.loads)
        if st.converged:
            claimed += 1
            assert loads.max() - loads.min() <= 0.05 * loads.max() * (1 + 1e-9)
    assert claimed >= 0.9 * len(steps)


def test_kk_matches_or_beats_lpt_with_few_items_per_rank():
    rng = np.random.default_rng(0)
    kk, lpt = [], []
    for _ in range(40):
        c = COST.sample_cost(rng.choice(TOK, 3 * W))
        kk.append(kk_partition(c, W)[1].max() / c.sum() * W)
        lpt.append(lpt_partition(c, W)[1].max() / c.sum() * W)
    kk, lpt = np.array(kk), np.array(lpt)
    assert kk.mean() < lpt.mean() and (kk <= lpt + 1e-9).mean() >= 0.8
    by = {n: make(n).epoch_steps(TOK, W, 0, 0) for n in ("pack-kk-fitted", "pack-lpt-fitted")}
    mm = {n: np.mean([s.loads.max() / s.loads.mean() for s in st]) for n, st in by.items()}
    assert mm["pack-kk-fitted"] <= mm["pack-lpt-fitted"]


def test_kk_equal_size_gives_every_rank_the_same_count():
    rng = np.random.default_rng(1)
    for n, R in ((37, 8), (96, 8), (5000, 1024)):
        c = COST.sample_cost(rng.choice(TOK, n))
        owner, loads = kk_equal_partition(c, R)
        count = np.bincount(owner, minlength=R)
        assert count.max() - count.min() <= 1 and count.sum() == n
        assert np.allclose(np.bincount(owner, weights=c, minlength=R), loads)
        dealt = np.bincount(np.arange(n) % R, weights=c, minlength=R)  # round-robin, unsorted
        assert loads.max() < dealt.max()


def test_packing_rejects_bad_input():
    with pytest.raises(ValueError, match="method"):
        CostAwarePacking.make(COST, M, method="rounds")
    with pytest.raises(ValueError, match="cost_form"):
        CostAwarePacking.make(COST, M, cost_form="tokens")
    with pytest.raises(ValueError, match="exceeds"):
        make("pack-lpt-fitted").epoch_plan(np.array([int(M) + 1, 10]), 2, 0, 0)
