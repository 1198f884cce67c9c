import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from suite.balance.policies import DualConstraint, EqualToken
from suite.balance.sampler import BucketBatchSampler

tok_lists = st.lists(st.sampled_from([1560, 3600, 7800, 32760, 75600]), min_size=1, max_size=300)


def _samplers(tokens, R, seed=0, policy=None, **kw):
    policy = policy or DualConstraint(m_mem=80_000, m_comp=80_000 * 20_000**0.5, p=1.5)
    return [
        BucketBatchSampler(tokens, policy, rank=r, world_size=R, seed=seed, **kw) for r in range(R)
    ]


@settings(max_examples=40, deadline=None)
@given(tok_lists, st.integers(1, 9), st.integers(0, 3), st.integers(0, 5))
def test_every_sample_once_per_epoch_disjoint_ranks(tokens, R, seed, epoch):
    ss = _samplers(tokens, R, seed)
    for s in ss:
        s.set_epoch(epoch)
    got = [i for s in ss for b in s for i in b]
    assert sorted(got) == list(range(len(tokens)))
    assert sum(len(s) for s in ss) == sum(len(list(s)) for s in ss)


@settings(max_examples=30, deadline=None)
@given(tok_lists, st.integers(1, 6))
def test_batches_are_one_bucket_with_policy_size(tokens, R):
    pol = EqualToken(80_000)
    tokens_a = np.array(tokens)
    for s in _samplers(tokens, R, policy=pol):
        for b in s:
            S = np.unique(tokens_a[b])
            assert len(S) == 1 and len(b) <= pol.batch_size(S[0])


def test_deterministic_per_seed_and_epoch():
    tokens = np.random.default_rng(0).choice([1560, 7800, 32760], 500)
    a, b = _samplers(tokens, 4, seed=7)[1], _samplers(tokens, 4, seed=7)[1]
    assert list(a) == list(b)
    c = _samplers(tokens, 4, seed=8)[1]
    assert list(a) != list(c)
    a.set_epoch(1)
    b.set_epoch(0)
    assert list(a) != list(b)


@settings(max_examples=30, deadline=None)
@given(tok_lists, st.integers(1, 5), st.integers(0, 20))
def test_resume_from_step(tokens, R, step):
    full = list(_samplers(tokens, R, seed=3)[0])
    s = _samplers(tokens, R, seed=3)[0]
    s.resume(step)
    assert list(s) == full[step:]
    assert len(s) == max(0, len(full) - step)


def test_state_dict_round_trip():
    tokens = np.random.default_rng(1).choice([1560, 7800, 32760], 400)
    s = _samplers(tokens, 2)[0]
    s.set_epoch(2)
    it = iter(s)
    first = [next(it) for _ in range(3)]
    state = s.state_dict()
    t = _samplers(tokens, 2)[0]
    t.load_state_dict(state)
    assert state["step"] == 3 and first + list(t) == list(_epoch(tokens, 2))


def _epoch(tokens, epoch):
    s = _samplers(tokens, 2)[0]
    s.set_epoch(epoch)
    return s


def test_drop_last_gives_equal_lengths():
    tokens = np.random.default_rng(2).choice([1560, 7800, 32760], 333)
    lens = {len(list(s)) for s in _samplers(tokens, 5, drop_last=True)}
    assert len(lens) == 1
