"""The one batch sampler over any policy's plan (suite.balance.sampler)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suite.balance.costmodel import default_cost_model
from suite.balance.global_policy import GlobalPolicy
from suite.balance.policies import DualConstraint, EqualToken
from suite.balance.sampler import BucketBatchSampler, GlobalBatchSampler, PlanBatchSampler

tok_lists = st.lists(st.sampled_from([1560, 3600, 7800, 32760, 75600]), min_size=1, max_size=300)
DUAL = DualConstraint(m_mem=80_000, m_comp=80_000 * 20_000**0.5, p=1.5)
GLOBAL = GlobalPolicy(m_mem=80_000, planner=default_cost_model())


def _samplers(tokens, R, seed=0, policy=DUAL):
    return [PlanBatchSampler(tokens, policy, rank=r, world_size=R, seed=seed) for r in range(R)]


def _epoch(ss, epoch):
    for s in ss:
        s.set_epoch(epoch)
    return [i for s in ss for b in s for i in b]


@settings(max_examples=30, deadline=None)
@given(tok_lists, st.integers(1, 9), st.integers(0, 3), st.integers(0, 5))
def test_global_every_sample_exactly_once_per_epoch_across_ranks(tokens, R, seed, epoch):
    ss = _samplers(tokens, R, seed, GLOBAL)
    assert sorted(_epoch(ss, epoch)) == list(range(len(tokens)))
    assert len({len(s) for s in ss}) == 1  # every rank runs the same number of steps


@settings(max_examples=30, deadline=None)
@given(tok_lists, st.integers(1, 9), st.integers(0, 3), st.integers(0, 5))
def test_bucket_every_sample_at_most_once_only_the_last_round_dropped(tokens, R, seed, epoch):
    ss = _samplers(tokens, R, seed)
    got = _epoch(ss, epoch)
    assert len(set(got)) == len(got)
    S, inv = np.unique(tokens, return_inverse=True)
    n_batches = int(np.sum(-(-np.bincount(inv) // DUAL.batch_size(S))))
    assert sum(len(s) for s in ss) == R * (n_batches // R)  # whole rounds, < R batches dropped


@settings(max_examples=20, deadline=None)
@given(tok_lists, st.integers(1, 6))
def test_bucket_batches_are_one_bucket_with_policy_size(tokens, R):
    pol = EqualToken(80_000)
    tokens_a = np.array(tokens)
    for s in _samplers(tokens, R, policy=pol):
        for b in s:
            S = np.unique(tokens_a[b])
            assert len(S) == 1 and len(b) <= pol.batch_size(S[0])


@pytest.mark.parametrize("policy", [DUAL, GLOBAL], ids=["dual", "global"])
def test_deterministic_per_seed_and_epoch(policy):
    tokens = np.random.default_rng(0).choice([1560, 7800, 32760], 500)
    a, b = _samplers(tokens, 4, 7, policy)[1], _samplers(tokens, 4, 7, policy)[1]
    assert list(a) == list(b)
    assert list(a) != list(_samplers(tokens, 4, 8, policy)[1])
    a.set_epoch(1)
    b.set_epoch(0)
    assert list(a) != list(b)


@settings(max_examples=20, deadline=None)
@given(tok_lists, st.integers(1, 5), st.integers(0, 20), st.booleans())
def test_resume_from_step(tokens, R, step, glob):
    pol = GLOBAL if glob else DUAL
    full = list(_samplers(tokens, R, 3, pol)[0])
    s = _samplers(tokens, R, 3, pol)[0]
    s.resume(step)
    assert list(s) == full[step:]
    assert len(s) == max(0, len(full) - step)


@pytest.mark.parametrize("policy", [DUAL, GLOBAL], ids=["dual", "global"])
def test_state_dict_round_trip(policy):
    tokens = np.random.default_rng(1).choice([1560, 7800, 32760], 400)
    s = _samplers(tokens, 2, policy=policy)[0]
    s.set_epoch(2)
    it = iter(s)
    first = [next(it) for _ in range(3)]
    state = s.state_dict()
    t = _samplers(tokens, 2, policy=policy)[0]
    t.load_state_dict(state)
    ref = _samplers(tokens, 2, policy=policy)[0]
    ref.set_epoch(2)
    assert state["step"] == 3 and first + list(t) == list(ref)
    with pytest.raises(ValueError, match="seed"):
        _samplers(tokens, 2, seed=9, policy=policy)[0].load_state_dict(state)


def test_micro_batches_carry_the_plans_weights():
    tokens = np.random.default_rng(2).choice([1560, 7800, 32760], 300)
    ss = _samplers(tokens, 3, policy=GLOBAL)
    for k in range(len(ss[0])):
        mbs = [mb for s in ss for mb in s.micro_batches(k)]
        assert sum(mb.weight for mb in mbs) == pytest.approx(1.0)
        assert all(len(set(tokens[mb.indices])) == 1 for mb in mbs)


def test_old_names_are_this_sampler():
    tokens = np.random.default_rng(3).choice([1560, 7800, 32760], 200)
    cost = default_cost_model()
    g = GlobalBatchSampler(tokens, cost, 80_000, rank=1, world_size=3, seed=4)
    ref = PlanBatchSampler(tokens, GlobalPolicy(80_000, planner=cost), rank=1, world_size=3, seed=4)
    assert list(g) == list(ref)
    b = BucketBatchSampler(tokens, DUAL, world_size=2, seed=1)
    p = DUAL.epoch_plan(tokens, 2, 1, 0)
    assert [x.tolist() for x in b.global_batches()] == [
        m.indices.tolist() for k in range(p.steps) for r in range(2) for m in p.micro_batches(k, r)
    ]
    with pytest.raises(ValueError, match="drop_last=False"):
        BucketBatchSampler(tokens, DUAL, drop_last=False)
    with pytest.raises(ValueError, match="rank must be in"):
        PlanBatchSampler(tokens, DUAL, rank=2, world_size=2)
