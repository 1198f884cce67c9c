"""The one Plan every policy yields (suite.balance.plan): its invariants and the two policy kinds."""

import numpy as np
import pytest

from suite.balance.costmodel import default_cost_model
from suite.balance.global_policy import GlobalPolicy
from suite.balance.plan import Plan, plan_steps
from suite.balance.policies import DualConstraint, EqualToken
from suite.balance.sampler import BucketBatchSampler
from suite.data.corpus import sample_corpus

TOK = sample_corpus(6000, seed=1).tokens.to_numpy()
M = 3 * 75600


def test_bucket_plan_is_the_bucket_samplers_batches():
    pol = DualConstraint(M, M * 20000**0.5, 1.5)
    for epoch in (0, 1):
        s = BucketBatchSampler(TOK, pol, world_size=8, seed=3, drop_last=True)
        s.set_epoch(epoch)
        batches = s.global_batches()
        plan = pol.epoch_plan(TOK, 8, 3, epoch)
        plan.check(TOK, max_tokens=M, epoch=True)
        assert plan.steps * 8 == len(batches)
        for j, b in enumerate(batches):
            (mb,) = plan.micro_batches(j // 8, j % 8)
            assert mb.indices.tolist() == b.tolist() and mb.weight == pytest.approx(1 / 8)


def test_global_plan_every_sample_once_and_token_weights():
    pol = GlobalPolicy(m_mem=M, planner=default_cost_model())
    plan = pol.epoch_plan(TOK, 16, 0, 0)
    plan.check(TOK, max_tokens=M, epoch=True)
    assert sorted(plan.samples.tolist()) == list(range(len(TOK)))
    t = plan.table(TOK)
    g = t.groupby("step")["tokens"].transform("sum")
    assert np.allclose(t["weight"], t["tokens"] / g)


def test_plan_steps_chains_epochs_deterministically():
    pol = EqualToken(M)
    one = pol.epoch_plan(TOK, 4, 0, 0)
    p = plan_steps(pol, TOK, 4, one.steps + 5, seed=0)
    assert p.steps == one.steps + 5
    assert np.array_equal(p.step_samples(one.steps), pol.epoch_plan(TOK, 4, 0, 1).step_samples(0))
    q = plan_steps(pol, TOK, 4, one.steps + 5, seed=0)
    assert np.array_equal(p.samples, q.samples)
    assert not np.array_equal(plan_steps(pol, TOK, 4, 5, seed=1).samples, p.head(5).samples)


def test_check_rejects_broken_plans():
    tok = np.array([10, 10, 20, 20])
    ok = Plan.from_micro_batches(2, [[[[0, 1]], [[2], [3]]]], [[[0.5], [0.25, 0.25]]])
    ok.check(tok, epoch=True)
    mixed = Plan.from_micro_batches(2, [[[[0, 2]], [[1]]]], [[[0.5], [0.5]]])
    with pytest.raises(ValueError, match="different sequence lengths"):
        mixed.check(tok)
    light = Plan.from_micro_batches(2, [[[[0]], [[1]]]], [[[0.5], [0.25]]])
    with pytest.raises(ValueError, match="sum to 0.75"):
        light.check(tok)
    twice = Plan.from_micro_batches(2, [[[[0]], [[0]]]], [[[0.5], [0.5]]])
    with pytest.raises(ValueError, match="twice"):
        twice.check(tok, epoch=True)
    with pytest.raises(ValueError, match="max_tokens"):
        ok.check(tok, max_tokens=15)
    with pytest.raises(ValueError, match="world = 3"):
        Plan.from_micro_batches(3, [[[[0]], [[1]]]], [[[0.5], [0.5]]])


def test_empty_rank_and_head():
    p = Plan.from_micro_batches(2, [[[[0]], []], [[[1]], [[2]]]], [[[1.0], []], [[0.5], [0.5]]])
    assert p.micro_batches(0, 1) == []
    assert [m.indices.tolist() for m in p.micro_batches(1, 1)] == [[2]]
    h = p.head(1)
    assert h.steps == 1 and h.samples.tolist() == [0]


def _bucket_epoch_plan_by_scans(tokens, batch_size, world, seed, epoch):
    """The earlier bucket_epoch_plan: one scan of the corpus per bucket and a stable argsort of
    the new batch positions (O(samples * buckets + samples log samples))."""
    from suite.balance.buckets import bucket_index

    S, bucket = bucket_index(tokens)
    B = np.asarray(batch_size(S), np.int64)
    rng = np.random.default_rng([seed, epoch])
    parts, batch_ids, n = [], [], 0
    for k in range(len(S)):
        idx = rng.permutation(np.flatnonzero(bucket == k))
        parts.append(idx)
        batch_ids.append(n + np.arange(len(idx)) // B[k])
        n += -(-len(idx) // B[k])
    sample, batch = np.concatenate(parts), np.concatenate(batch_ids)
    order = rng.permutation(n)
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    new = pos[batch]
    o = np.argsort(new, kind="stable")
    return Plan.from_batches(world, new[o], sample[o])


@pytest.mark.parametrize("trial", range(40))
def test_bucket_epoch_plan_is_the_plan_of_the_per_bucket_scans(trial):
    """Old behaviour: one flatnonzero scan per bucket and a sort of the batches' new positions
    (70% of a bootstrap replicate's time in the s_cross tuning). The grouping by one stable sort
    and the O(samples) regrouping give the same plan, field for field, on random corpora."""
    from suite.balance.plan import bucket_epoch_plan

    rng = np.random.default_rng(trial)
    n = int(rng.integers(1, 3000))
    shapes = [1560, 3600, 7800, 14040, 32760, 75600]
    tokens = rng.choice(shapes, n) if trial % 2 else rng.integers(1, 50, n)
    cap = int(rng.integers(1, 9))

    def batch_size(S):
        return np.maximum(1, cap * 75600 // S) if trial % 3 else np.full(len(S), cap)

    world = int(rng.integers(1, 20))
    want = _bucket_epoch_plan_by_scans(tokens, batch_size, world, trial, 1)
    got = bucket_epoch_plan(tokens, batch_size, world, trial, 1)
    assert got.steps == want.steps
    for field in ("mb_step", "mb_rank", "mb_weight", "mb_start", "samples"):
        assert np.array_equal(getattr(got, field), getattr(want, field)), field


# ----------------------------------------------------------------------------- varlen packs


def test_pack_runs_a_ranks_share_as_few_packs_under_the_cap_with_the_same_weights():
    """Plan.pack keeps every sample, its rank and step, and the step's weights; each pack holds
    at most M tokens (mixed lengths allowed only in a packed plan); a rank's share of at most M
    tokens is one pack."""
    plan = GlobalPolicy(m_mem=M, planner=default_cost_model()).epoch_plan(TOK, 16, 0, 0)
    packed = plan.pack(TOK, M)
    packed.check(TOK, max_tokens=M, epoch=True)
    assert packed.packed and not plan.packed
    assert np.array_equal(packed.samples, plan.samples)
    assert np.allclose(packed.rank_sums(packed.mb_weight), plan.rank_sums(plan.mb_weight))
    B, S, tok = packed.lengths(TOK)
    assert (S == 0).any() and tok.sum() == TOK.sum()
    share = plan.rank_sums(plan.table(TOK)["tokens"].to_numpy())
    packs = packed.rank_sums(np.ones(packed.n_micro))
    assert (packs[share <= M] == 1).all() and (packs[share > M] >= 2).all()
    assert packed.n_micro < plan.n_micro / 3
    with pytest.raises(ValueError, match="different sequence lengths"):
        Plan(**{**packed.__dict__, "packed": False}).check(TOK)


def test_pack_cuts_a_ranks_samples_in_order_at_the_cap():
    tok = np.array([50, 40, 30, 20, 10, 100])
    p = Plan.from_micro_batches(1, [[[[0], [1], [2], [3], [4], [5]]]], [[[t / 250 for t in tok]]])
    packed = p.pack(tok, 100)
    assert [len(m.indices) for m in packed.micro_batches(0, 0)] == [2, 3, 1]
    assert packed.lengths(tok)[2].tolist() == [90, 60, 100]
    assert packed.mb_weight.tolist() == pytest.approx([90 / 250, 60 / 250, 100 / 250])


def test_pack_refuses_weights_not_in_proportion_to_tokens():
    """A bucket policy's batches weigh 1 / world each whatever their tokens: one loss over a pack
    of them would reweight its samples, so packing refuses it."""
    tok = np.array([100, 300])
    plan = Plan.from_micro_batches(1, [[[[0], [1]]]], [[[0.5, 0.5]]], "equal-token")
    Plan.from_micro_batches(1, [[[[0], [1]]]], [[[0.25, 0.75]]]).pack(tok, 400)  # in proportion
    with pytest.raises(ValueError, match="not in proportion to their tokens"):
        plan.pack(tok, 400)


def test_packed_policy_answers_for_the_policy_it_wraps():
    from suite.balance.plan import Packed

    inner = GlobalPolicy(m_mem=M, planner=default_cost_model())
    pol = Packed(inner, M, "global-packed")
    assert pol.m_mem == M and pol.name == "global-packed"
    plan = plan_steps(pol, TOK, 8, 5, seed=0)
    assert plan.packed and plan.policy == "global-packed" and plan.steps == 5
    assert np.array_equal(plan.samples, plan_steps(inner, TOK, 8, 5, seed=0).samples)
