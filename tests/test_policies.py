import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from suite.balance.buckets import bucket_table
from suite.balance.policies import DualConstraint, EqualToken, m_comp_for_crossover

S_ = st.integers(1, 200_000)
budgets = st.tuples(st.floats(1e3, 1e6), st.floats(1.0, 2.5), st.floats(100, 1e5))


def _dual(b):
    m_mem, p, s_cross = b
    return DualConstraint(m_mem=m_mem, m_comp=m_comp_for_crossover(m_mem, p, s_cross), p=p)


@given(budgets, st.lists(S_, min_size=1, max_size=50))
def test_dual_b_at_least_one_and_constraints_hold_when_b_gt_1(b, S):
    pol = _dual(b)
    S = np.array(S, float)
    B = pol.batch_size(S)
    assert (B >= 1).all()
    big = B > 1
    assert (B[big] * S[big] <= pol.m_mem * (1 + 1e-9)).all()
    assert (B[big] * S[big] ** pol.p <= pol.m_comp * (1 + 1e-9)).all()


@given(budgets, S_, S_)
def test_dual_b_non_increasing_in_s(b, s1, s2):
    pol = _dual(b)
    lo, hi = sorted((s1, s2))
    assert pol.batch_size(lo) >= pol.batch_size(hi)


@given(st.floats(1e3, 1e6), st.lists(S_, min_size=1, max_size=50))
def test_equal_token(m_tok, S):
    B = EqualToken(m_tok).batch_size(np.array(S))
    assert (B >= 1).all()
    assert (B[B > 1] * np.array(S)[B > 1] <= m_tok * (1 + 1e-9)).all()


def test_hand_values():
    pol = DualConstraint(m_mem=226_444, m_comp=226_444 * 32_760**0.5, p=1.5)
    # images: memory-bound; longest video: compute-bound
    assert pol.batch_size(1560) == 145
    assert pol.batch_size(75_600) == 1
    assert pol.batch_size(32_760) == 6
    assert EqualToken(75_600).batch_size(75_600) == 1  # no round-off to zero


def test_bucket_table_counts_and_b():
    t = bucket_table([5, 5, 10, 20, 20, 20], EqualToken(40))
    assert t["S"].tolist() == [5, 10, 20]
    assert t["count"].tolist() == [2, 1, 3]
    assert t["B"].tolist() == [8, 4, 2]
    assert abs(t["share"].sum() - 1) < 1e-12
