"""The shapes experiment's grid, sweep mechanics and CPU run (diffusers' tiny Wan config)."""

import pytest

from suite.balance.shapebench import (
    ShapeOutOfMemory,
    equal_token_batch,
    equal_token_grid,
    estimate_seconds,
    sweep_with_skips,
    synthetic_step_fn,
)
from suite.experiments import shapes
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
    assert min(prof.buckets) == 1560 and max(prof.buckets) == 75_600


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


def test_budget_estimates_stay_within_one_device_call():
    for name, limit in (("quick", 200), ("full", 480)):
        p = shapes.PROFILES[name]
        g = equal_token_grid(p.buckets, p.m_tok, p.ladder_tokens)
        assert estimate_seconds(g, shapes.prior_seconds, p.warmup, p.repeats) < limit
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
    with pytest.raises(ValueError, match="repeats >= 1"):
        sweep_with_skips(step, shapes_, repeats=0)


def test_shapes_experiment_on_cpu_writes_the_sweep_with_what_it_ran_on(tmp_path):
    opts = {"buckets": (64, 256, 1024), "m_tok": 1024, "ladder_tokens": 128, "repeats": 2}
    ctx = RunContext(RunDir(tmp_path), "cpu", "cpu", options={"shapes": opts})
    out = shapes.run(ctx)
    sw, skipped, warm = out["shapes_sweep"], out["shapes_skipped"], out["shapes_warmup"]
    cols = ["B", "S", "tokens", "bs2", "repeat", "step_s", "peak_mem_bytes", "optimizer_s"]
    cols += ["device", "model"]
    cols += ["layers", "dim", "dtype", "adaln", "checkpointing", "m_tok", "text_len", "arch"]
    assert list(sw.columns) == cols
    shapes_run = equal_token_grid((64, 256, 1024), 1024, 128)
    assert len(sw) == 2 * len(shapes_run) and len(warm) == len(shapes_run) and skipped.empty
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
