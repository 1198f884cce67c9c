"""Every peer against an oracle of its project's behaviour (tests/oracles): equal on random and on
tie-heavy integer inputs, and each deviation the registry names shown to be the one it says."""

import numpy as np
import pytest

from suite.balance.costmodel import default_cost_model
from suite.balance.global_policy import greedy_partition, kk_partition, lpt_partition
from suite.balance.peers import (
    DCPGradAccumulation,
    ProfiledRescale,
    fitting_batch,
    grad_accumulation_counts,
    lengths_of,
    search_batch_sizes,
)
from suite.balance.peers_dit import (
    GAMMA_SWEEP,
    KnapFormerBags,
    fit_gamma,
    fit_rank_cost,
    knapformer_bags,
    loongforge_reorder,
    rebalance_packs,
)
from suite.balance.peers_packing import kk_equal_partition, megatron_groups
from suite.balance.registry import POLICIES, PolicyInputs, make_policy
from suite.data.corpus import sample_corpus
from tests.oracles import (
    knapformer_balancer,
    loongforge_balance,
    megatron_hdp,
    opensora_search_bs,
    verl_kk,
    videosys_profile,
)

COST = default_cost_model()
TOK = sample_corpus(3000, seed=2).tokens.to_numpy()


def cases(seed: int, n_cases: int = 120):
    """(ranks, values): alternately continuous and tie-heavy small integers."""
    rng = np.random.default_rng(seed)
    for k in range(n_cases):
        R = int(rng.choice([2, 3, 4, 8, 16]))
        n = int(rng.integers(R, 12 * R))
        if k % 2:
            yield R, rng.integers(1, int(rng.choice([3, 6, 20])), n).astype(float)
        else:
            yield R, rng.uniform(1, 100, n)


# ----------------------------------------------------------------------------- verl


def _verl_loads(c, R, equal_size=False):
    parts = verl_kk.karmarkar_karp(c.tolist(), R, equal_size)
    return np.sort([c[p].sum() for p in parts]), parts


@pytest.mark.parametrize("equal_size", [False, True])
def test_kk_is_verls(equal_size):
    """The loads of verl's karmarkar_karp on every case; with distinct costs, its partition."""
    for R, c in cases(1):
        c = c[: len(c) - len(c) % R] if equal_size else c
        ref, parts = _verl_loads(c, R, equal_size)
        owner, loads = (kk_equal_partition if equal_size else kk_partition)(c, R)
        mine = np.sort(np.bincount(owner, weights=c, minlength=R))
        assert np.allclose(mine, ref, rtol=1e-12, atol=0)  # exact on the integer cases
        if len(np.unique(c)) == len(c):
            assert sorted(map(sorted, parts)) == sorted(
                sorted(np.flatnonzero(owner == r).tolist()) for r in range(R)
            )


def test_kk_ties_break_as_verls_not_by_age():
    """Two states of equal spread: verl pops the one with the larger largest sum first; popping
    the older first would give 8 | 9 | 9 here, verl gives 8 | 8 | 10, and so does the suite."""
    c = np.array([4.0, 6, 2, 3, 2, 4, 5])
    assert _verl_loads(c, 3)[0].tolist() == [8, 8, 10]
    assert np.sort(kk_partition(c, 3)[1]).tolist() == [8, 8, 10]


# ----------------------------------------------------------------------------- Megatron-LM


def _megatron(S, R):
    groups = megatron_hdp.groups_and_subsamples(list(enumerate(S.tolist())), R)
    owner, group = np.full(len(S), -1), np.full(len(S), -1)
    for g, (ids, _) in enumerate(groups):
        for r, members in enumerate(ids):
            owner[members], group[members] = r, g
    return owner, group, [empty for _, empty in groups]


def test_megatron_groups_are_megatrons():
    for R, c in cases(2):
        S = (c * 37).astype(np.int64)  # lengths; Megatron's workload is L^2
        owner, group, _ = megatron_groups(S.astype(float) ** 2, R, 0.05)
        ref_owner, ref_group, _ = _megatron(S, R)
        assert np.array_equal(owner, ref_owner) and np.array_equal(group, ref_group)


def test_megatron_leaves_idle_gpus_idle_where_megatron_splits_by_cp():
    """Declared: a group with fewer samples than GPUs. Megatron's fill_empty_gpus would split a
    sample across the idle GPUs by context parallelism; here they stay idle."""
    S = np.array([900, 800, 700, 200, 100])
    owner, group, _ = megatron_groups(S.astype(float) ** 2, 8, 0.05)
    assert set(owner.tolist()) == {0, 1, 2, 3, 4}  # 3 of 8 ranks idle
    assert _megatron(S, 8)[2] == [True]  # Megatron would fill them


def test_pack_trim_runs_megatrons_groups_inside_each_step():
    """pack-trim-5pct prices L^2 and gives each step's window Megatron's assignment: trimmed
    samples run in the same step (its next group), never the next step."""
    pol = make_policy("pack-trim-5pct", PolicyInputs.from_cost(COST, TOK))
    assert np.array_equal(pol.sample_cost([3, 4]), [9, 16])
    for st in pol.epoch_steps(TOK, 8, 0, 0)[:5]:
        assert np.array_equal(st.owner, _megatron(TOK[st.samples], 8)[0])


def test_lpt_is_item_by_item_as_megatron_and_knapformer_assign():
    """greedy_partition is Megatron's group assignment without the trim and KnapFormer's
    one-GPU-bag routing; pack-lpt-* use it. The suite's own planner keeps LPT in rounds, which
    at ~10 items per rank is further from balance."""
    for R, c in cases(3):
        owner, loads = greedy_partition(c, R)
        by_length = sorted(enumerate(c.tolist()), key=lambda x: x[1], reverse=True)
        ref = megatron_hdp.next_group(by_length, lambda s, cp=None: s, R, delta=np.inf)[0]
        assert [sorted(ids) for ids in ref] == [
            sorted(np.flatnonzero(owner == r).tolist()) for r in range(R)
        ]
    for name in ("pack-lpt-flops", "pack-lpt-fitted"):
        assert POLICIES[name].build(PolicyInputs.from_cost(COST, TOK)).method == "greedy"
    rng = np.random.default_rng(0)
    c = [COST.sample_cost(rng.choice(TOK, 10 * 64)) for _ in range(20)]
    exact = np.mean([greedy_partition(x, 64)[1].max() * 64 / x.sum() for x in c])
    rounds = np.mean([lpt_partition(x, 64)[1].max() * 64 / x.sum() for x in c])
    assert exact < rounds


# ----------------------------------------------------------------------------- KnapFormer


def test_knapformer_bags_are_plan_routing():
    rng = np.random.default_rng(4)
    for R, c in cases(4):
        S = (c * 1560).astype(np.int64)
        src = np.sort(rng.integers(0, R, len(S)))  # gather order: by source GPU
        per_gpu = [S[src == r].tolist() for r in range(R)]
        gamma = float(rng.choice([0.0, 1.0, 1.37]))
        ref_bag, ref_occ = knapformer_balancer.plan_routing(per_gpu, 5120, gamma, [(1, R)])
        pol = KnapFormerBags(m_mem=1e9, gamma=gamma)
        bag, occ = knapformer_bags(pol.sample_cost(S), R)
        assert bag.tolist() == ref_bag and np.array_equal(occ, ref_occ)


def test_knapformer_gamma_is_its_lstsq_on_its_sweep():
    """Declared: KnapFormer times one sequence's forward; here the latency is the cost model's
    one-sample step, solved in float64 where KnapFormer uses float32."""
    assert np.array_equal(GAMMA_SWEEP, knapformer_balancer.seq_len_test_list())
    pol = make_policy("knapformer", PolicyInputs.from_cost(COST, TOK))
    t = COST.step_model().predict(1, GAMMA_SWEEP)
    assert pol.gamma == pytest.approx(
        knapformer_balancer.benchmark_gamma(GAMMA_SWEEP, t, 5120), rel=1e-4
    )
    # a sweep whose attention term fits negative: KnapFormer would use it, here it is 0
    S = GAMMA_SWEEP.astype(float)
    neg = 1e-15 * (24 * S * 5120**2 - 0.5 * 4 * S**2 * 5120)
    assert knapformer_balancer.benchmark_gamma(GAMMA_SWEEP, neg, 5120) < 0
    assert fit_gamma(GAMMA_SWEEP, neg) < 0

    class _Neg:
        def predict(self, B, S):
            S = np.asarray(S, float)
            return 1e-15 * (24 * S * 5120**2 - 0.5 * 4 * S**2 * 5120)

    assert KnapFormerBags.fit(_Neg(), TOK, COST.m_mem).gamma == 0.0


# ----------------------------------------------------------------------------- LoongForge


def test_loongforge_reorder_is_solve_sample_dp_reorder_plan():
    rng = np.random.default_rng(5)
    applied = 0
    for k, (R, c) in enumerate(cases(5, 160)):
        L = (c * 97).astype(np.int64)
        src = np.sort(rng.integers(0, R, len(L)))
        x, y, z = [(0.0, 1.0, 0.0), (1e-6, 3.0, 50.0), (1e-5, 0.0, 0.0)][k % 3]
        hist = None if k % 4 else (rng.integers(0, 3, R) * 1000.0).tolist()

        def f(s, x=x, y=y, z=z):
            return x * s * s + y * s + z

        ref_rank, ref_cost = loongforge_balance.solve_sample_dp_reorder_plan(
            L.tolist(), src.tolist(), R, f, dp_historical_costs=hist
        )
        rank, cost = loongforge_reorder(f(L.astype(float)), L, src, R, hist)
        assert (rank is None) == (ref_rank is None)
        assert rank is None or rank.tolist() == ref_rank
        assert np.array_equal(cost, ref_cost)
        applied += rank is not None
    assert applied > 40  # the reorder ran, not only the skip


def test_loongforge_fit_is_solve_computation_coef():
    rng = np.random.default_rng(6)
    for _ in range(3):
        g = rng.uniform(0, 1, (9, 8, 3)) * [1e9, 1e5, 20]
        ms = rng.uniform(100, 300, 9)
        assert fit_rank_cost(g, ms) == loongforge_balance.solve_computation_coef(g.tolist(), ms)


def test_loongforge_carries_costs_across_the_steps_micro_batches():
    """With two packs per rank per step, the second micro-batch is balanced on the step's
    total: its reorder starts from the first's per-rank costs (the oracle, fed that history)."""
    rng = np.random.default_rng(7)
    t = rng.choice([1560, 3600, 7800, 32760], 400)
    step = np.repeat(np.arange(10), 40)
    micro = np.tile(np.repeat([0, 1], 20), 10)
    src = np.tile(np.repeat(np.arange(4), 5), 20)
    rank = rebalance_packs(lambda s: np.asarray(s, float) ** 2, t, step, micro, src, 4)
    for k in range(10):
        hist = None
        for j in (0, 1):
            sel = np.flatnonzero((step == k) & (micro == j))
            ref, cost = loongforge_balance.solve_sample_dp_reorder_plan(
                t[sel].tolist(), src[sel].tolist(), 4, lambda s: s * s, dp_historical_costs=hist
            )
            assert rank[sel].tolist() == (ref if ref is not None else src[sel].tolist())
            hist = cost if hist is None else [a + b for a, b in zip(hist, cost)]


# ----------------------------------------------------------------------------- Open-Sora


def _step_time(S, cap):
    def run(B):
        if B * S > cap:
            raise MemoryError
        return float(COST.predict(B, S))

    return run


def test_opensora_search_is_search_bs():
    S = lengths_of(TOK)
    cap = COST.m_mem
    hi = {int(s): (1, int(fitting_batch(s, cap)) + 7) for s in S}  # bounds past the memory cap
    ref = opensora_search_bs.search(lambda s: _step_time(s, cap), hi, int(S.max()))
    got = search_batch_sizes(COST, S, int(S.max()), cap)
    for s, b in zip(S.tolist(), got.tolist()):
        assert b == max(ref[s], 1)  # declared: where no B beats the base, 1 (Open-Sora: 0)


def test_opensora_runs_the_remainder_open_sora_drops():
    """Declared: each bucket's last partial batch runs here; Open-Sora's drop_last=True drops
    it (drop_remainder keeps len - len % B samples of the bucket)."""
    pol = make_policy("opensora-searched", PolicyInputs.from_cost(COST, TOK))
    S = lengths_of(TOK)
    B = pol.batch_size(S)
    plan = pol.epoch_plan(TOK, 1, 0, 0)
    t = plan.table(TOK)
    partial = 0
    for s, b in zip(S, B):
        n = int((TOK == s).sum())
        kept = len(opensora_search_bs.drop_remainder(list(range(n)), int(b)))
        assert kept == n - n % b
        ran = int(t.loc[t["S"] == s, "B"].sum())
        assert ran == n  # world 1: no dealt round is cut, every sample runs
        partial += n % b > 0
    assert partial > 0


# ----------------------------------------------------------------------------- VideoSys


def test_videosys_profile_is_the_baselines():
    S = lengths_of(TOK)
    cap = COST.m_mem
    prof = {int(s): videosys_profile.profile_bucket(_step_time(s, cap)) for s in S}
    ref = videosys_profile.interpolate_profile_results(prof)
    pol = ProfiledRescale.profile(COST, TOK, cap)
    assert pol.batch_size(S).tolist() == [ref[int(s)]["bs"] for s in S]


def test_dcp_batch_is_the_profilers_best():
    """Each bucket's batch: the profiled powers of two (doubled from 1 while they fit), the row
    of most samples per second."""
    pol = make_policy("videosys-dcp", PolicyInputs.from_cost(COST, TOK))
    S = lengths_of(TOK)
    for s, b in zip(S, pol.batch_size(S)):
        rows, B = [], 1
        while B * s <= COST.m_mem:
            rows.append(("ar", int(s), B, 1, float(COST.predict(B, s))))
            B *= 2
        assert videosys_profile.best_row(rows)[2] == b


def test_dcp_accumulation_counts_are_videosys():
    rng = np.random.default_rng(8)
    for k in range(150):
        R = int(rng.integers(1, 12))
        e = rng.choice([0.5, 1.0, 1.7, 3.3], R) if k % 2 else rng.uniform(0.2, 5, R)
        top = int(rng.choice([3, 5]))
        ref = videosys_profile.calculate_grad_accumulation_num(e.tolist(), top, 2)
        assert grad_accumulation_counts(e, top, 2).tolist() == ref


def test_dcp_evens_the_ranks_step_times():
    """Each step: every rank one bucket, its count of max batches; the counts are the source's
    for the ranks' profiled times, and the longest rank's time is within one max batch."""
    pol = make_policy("videosys-dcp", PolicyInputs.from_cost(COST, TOK))
    assert isinstance(pol, DCPGradAccumulation)
    plan = pol.epoch_plan(TOK, 4, 0, 0)
    t = plan.table(TOK)
    assert plan.steps > 3
    for k in range(plan.steps):
        rows = t[t["step"] == k]
        assert (rows.groupby("rank")["S"].nunique() == 1).all()  # one bucket per rank
        S = rows.groupby("rank")["S"].first().to_numpy()
        gas = grad_accumulation_counts(COST.predict(pol.batch_size(S), S), 3, 2)
        assert (rows.groupby("rank").size().to_numpy() <= gas).all()
