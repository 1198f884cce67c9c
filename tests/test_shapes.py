"""The shapes experiment's grid, sweep mechanics (round-robin order, adaptive repeats, held-out
shapes) and CPU run (diffusers' tiny Wan config)."""

import numpy as np
import pytest

from suite.balance.shapebench import (
    Repeats,
    ShapeOutOfMemory,
    equal_token_batch,
    equal_token_grid,
    estimate_seconds,
    pass_schedule,
    sweep_with_skips,
    synthetic_step_fn,
)
from suite.experiments.costmodel import sweep as shapes
from suite.rundir import RunContext, RunDir


@pytest.mark.parametrize("name", ["quick", "full"])
def test_gpu_profiles_time_the_30_block_wan_1_3b_with_checkpointing_in_bf16(name):
    prof = shapes.PROFILES[name]
    assert (prof.model, prof.layers, prof.dtype, prof.checkpointing) == (
        "wan-1.3b",
        None,
        "bf16",
        True,
    )
    assert prof.warmup == 1 and prof.repeats >= 2 and prof.m_tok == 75_600
    assert prof.max_repeats >= 6 and prof.shape_seconds > 0
    assert min(prof.buckets) == 1560 and max(prof.buckets) == 75_600
    # every region held out, none of it on the grid
    grid = set(prof.grid())
    assert {r for *_, r in prof.heldout} == set(shapes.REGIONS)
    assert not {(B, S) for B, S, _ in prof.heldout} & grid


def test_quick_grid_has_every_buckets_equal_token_batch_and_b1_for_the_longest():
    prof = shapes.PROFILES["quick"]
    g = equal_token_grid(prof.buckets, prof.m_tok, prof.ladder_tokens)
    assert len(set(g)) == len(g) and len(prof.buckets) == 8  # 8 of the default mix's 11
    for s in prof.buckets:
        assert (prof.m_tok // s, s) in g and (1, s) in g
    assert (1, 75_600) in g and max(b * s for b, s in g) <= prof.m_tok
    # more than one B at the short buckets, so the fit can separate B from S
    assert len({b for b, s in g if s == 1560}) >= 4
    # descending B * S: the allocator grows in the first shapes
    tokens = [b * s for b, s in g]
    assert tokens == sorted(tokens, reverse=True)


def test_budget_estimates_stay_within_the_profiles_seconds():
    for name in ("quick", "full"):
        p = shapes.PROFILES[name]
        # held-out shapes and extra repeats included, the model's build left for the rest
        assert shapes.planned_seconds(p) <= p.budget_s < shapes.SECONDS[name]
        g = equal_token_grid(p.buckets, p.m_tok, p.ladder_tokens)
        assert estimate_seconds(g, shapes.prior_seconds, p.warmup, p.repeats) < p.budget_s
    assert shapes.SECONDS["quick"] <= 175 and shapes.SECONDS["full"] <= 445
    # the prior reproduces the H200 numbers it was solved from
    assert shapes.prior_seconds(1, 32_760) == pytest.approx(2.6, abs=0.01)
    ratio = shapes.prior_seconds(1, 75_600) / shapes.prior_seconds(48, 1560)
    assert ratio == pytest.approx(3.8, abs=0.05)


def test_equal_token_batch_needs_the_longest_bucket_to_fit():
    assert equal_token_batch(1560, 75_600) == 48 and equal_token_batch(75_600, 75_600) == 1
    with pytest.raises(ValueError, match="M_tok = 32760"):
        equal_token_batch(75_600, 32_760)


def test_an_out_of_memory_shape_is_recorded_as_skipped_and_the_sweep_goes_on():
    step = synthetic_step_fn(m0=0, m1=1.0, capacity=10_000)  # peak = B*S bytes
    calls = []

    def counted(B, S):
        calls.append((B, S))
        return step(B, S)

    shapes_ = [(1, 8000), (2, 8000), (4, 1000)]
    timed, skipped, warm = sweep_with_skips(counted, shapes_, warmup=1, repeats=2, meta={"m": 1})
    assert skipped[["B", "S", "tokens"]].values.tolist() == [[2, 8000, 16000]]
    assert "capacity" in skipped["reason"].iloc[0] and (skipped["m"] == 1).all()
    assert sorted(set(zip(timed["B"], timed["S"]))) == [(1, 8000), (4, 1000)]
    assert timed["repeat"].tolist() == [0, 1, 0, 1] and len(warm) == 2
    assert calls.count((2, 8000)) == 1 and calls.count((4, 1000)) == 3  # warm-up + 2 timed
    with pytest.raises(ValueError, match="1 <= lo <= hi, got lo=0"):
        sweep_with_skips(step, shapes_, repeats=0)
    with pytest.raises(ValueError, match="distinct"):
        sweep_with_skips(step, [(1, 10), (1, 10)])


def test_shapes_experiment_on_cpu_writes_the_sweep_with_what_it_ran_on(tmp_path):
    opts = {"buckets": (64, 256, 1024), "m_tok": 1024, "ladder_tokens": 128, "repeats": 2}
    ctx = RunContext(RunDir(tmp_path), "cpu", "cpu", options={"shapes": opts})
    out = shapes.run(ctx)
    sw, skipped, warm = out["shapes_sweep"], out["shapes_skipped"], out["shapes_warmup"]
    cols = ["B", "S", "tokens", "bs2", "repeat", "step_s", "peak_mem_bytes", "optimizer_s"]
    cols += ["device", "model"]
    cols += ["layers", "dim", "dtype", "adaln", "checkpointing", "m_tok", "text_len", "arch"]
    assert list(sw.columns) == [*cols, "pass", "order"]
    held = out["shapes_heldout"]
    assert list(held.columns) == [*cols, "pass", "order", "region"]
    shapes_run = equal_token_grid((64, 256, 1024), 1024, 128)
    heldout = {(B, S) for B, S, _ in shapes.HELDOUT_CPU}
    # the grid in shapes_sweep, the held-out shapes only in shapes_heldout, timed in its passes
    assert set(zip(sw["B"], sw["S"])) == set(shapes_run)
    assert set(zip(held["B"], held["S"])) == heldout and set(held["region"]) == set(shapes.REGIONS)
    assert set(held["pass"]) <= set(sw["pass"])
    per_shape = sw.groupby(["B", "S"]).size()
    assert per_shape.min() >= 2 and per_shape.max() <= shapes.PROFILES["cpu"].max_repeats
    assert len(warm) == len(shapes_run) + len(heldout) and skipped.empty
    assert (sw["step_s"] > 0).all() and (sw["peak_mem_bytes"] == 0).all()
    row = sw.iloc[0]
    assert (row["model"], row["layers"], row["dim"], row["dtype"]) == ("tiny", 2, 32, "fp32")
    assert row["checkpointing"] and row["arch"].startswith("diffusers WanTransformer3DModel")
    assert shapes.summarize(out).empty
    with pytest.raises(ValueError, match="unknown keys \\['S'\\]"):
        shapes.run(RunContext(RunDir(tmp_path), "cpu", "cpu", options={"shapes": {"S": (64,)}}))


def test_shape_out_of_memory_names_the_shape():
    e = ShapeOutOfMemory(3, 1560, "tried to allocate 2 GiB")
    assert isinstance(e, MemoryError) and "B=3 S=1560" in str(e) and e.reason.startswith("tried")


def _recording_step(seconds):
    """A step function returning seconds(B, S) and recording each call in order."""
    calls = []

    def step(B, S):
        calls.append((B, S))
        return seconds(B, S), 0.0

    return step, calls


def test_sweep_order_is_one_warm_up_pass_then_shuffled_round_robin_passes():
    shapes_ = [(8, 100), (4, 100), (2, 100), (1, 100), (1, 50)]
    step, calls = _recording_step(lambda B, S: 1.0)
    timed, _, warm = sweep_with_skips(step, shapes_, warmup=1, repeats=4, seed=3)
    assert calls[:5] == shapes_  # the warm-up pass, in the order given (descending memory)
    assert warm["pass"].eq(-1).all() and warm["order"].tolist() == [0, 1, 2, 3, 4]
    # every pass visits every shape once (equal repeats), in the order the rows record
    seq = timed.sort_values(["pass", "order"])
    assert seq.groupby("pass").size().tolist() == [5] * 4
    assert list(zip(seq["B"], seq["S"])) == calls[5:]
    orders = [tuple(zip(g["B"], g["S"])) for _, g in seq.groupby("pass")]
    assert len(set(orders)) > 1  # shuffled per pass, not one fixed order
    # rows come by shape, then repeat; a shape's repeats in increasing passes
    assert list(zip(timed["B"], timed["S"])) == [bs for bs in shapes_ for _ in range(4)]
    assert (timed.groupby(["B", "S"])["pass"].diff().dropna() > 0).all()
    # seeded: the same seed gives the same order
    step2, calls2 = _recording_step(lambda B, S: 1.0)
    sweep_with_skips(step2, shapes_, warmup=1, repeats=4, seed=3)
    assert calls2 == calls


def test_cheap_shapes_get_more_repeats_spread_over_the_whole_sweep():
    cost = {(1, 100): 0.2, (2, 100): 0.5, (8, 100): 4.0, (16, 100): 9.0}
    step, calls = _recording_step(lambda B, S: cost[(B, S)])
    rule = Repeats(lo=2, hi=8, shape_seconds=2.0)
    timed, _, _ = sweep_with_skips(step, list(cost), warmup=1, repeats=rule)
    n = timed.groupby(["B", "S"]).size()
    assert n[(1, 100)] == 8 and n[(2, 100)] == 4 and n[(8, 100)] == n[(16, 100)] == 2
    passes = timed.groupby(["B", "S"])["pass"].agg(list)
    assert passes[(16, 100)] == [2, 6] and passes[(2, 100)] == [1, 3, 5, 7]  # spread, centred
    assert passes[(1, 100)] == list(range(8))
    # the budget takes extras back, most-repeated first, never below lo
    warm = list(cost.values())
    assert rule.counts(warm) == [8, 4, 2, 2]
    tight = Repeats(lo=2, hi=8, shape_seconds=2.0, budget_s=2 * sum(warm) + 1.0)
    r = tight.counts(warm)
    assert r[2:] == [2, 2] and np.dot(r, warm) <= tight.budget_s and r[0] > 2
    assert Repeats(2, 8, 2.0, budget_s=1.0).counts(warm) == [2, 2, 2, 2]


def test_pass_schedule_gives_each_shape_its_repeats_in_distinct_passes():
    for reps in ([1, 2, 3], [2, 8, 5, 7], [3, 3]):
        due = pass_schedule(reps)
        assert len(due) == max(reps)
        for i, r in enumerate(reps):
            where = [p for p, d in enumerate(due) if i in d]
            assert len(where) == r == len(set(where))
            # spread: a shape's repeats reach both ends of the sweep, not its first passes only
            P = len(due)
            assert where[0] < P / r and where[-1] >= P - P / r


def test_profile_rejects_held_out_shapes_on_the_grid_and_unknown_regions(tmp_path):
    run = RunDir(tmp_path)
    on_grid = {"heldout": ((1, 64, "long_single"),)}
    with pytest.raises(ValueError, match=r"held-out shapes \[\(1, 64\)\] are on the sweep's grid"):
        shapes.profile_for(RunContext(run, "cpu", "cpu", options={"shapes": on_grid}))
    odd = {"heldout": ((3, 48, "middle"),)}
    with pytest.raises(ValueError, match="regions \\['middle'\\] unknown"):
        shapes.profile_for(RunContext(run, "cpu", "cpu", options={"shapes": odd}))
