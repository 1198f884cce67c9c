"""CPU tests of the tuning lab's variant sweep (lab/variant_sweep.py): which impls a sweep
times, its summary table, per-call variant selection and its CLI's refusals."""

import pytest
import torch


def test_variant_impls_and_table():
    from lab.variant_sweep import variant_impls, variant_table
    from suite.experiments.kernels.bench import summary_row

    # a known variant counts for the ops whose fields it sets (round1: both), others by prefix
    for op in ("fwd", "bwd"):
        assert variant_impls(op, ["default", "round1"])[1] == "fused@round1"
    vs = ["default", "fwd-r2", "fwd-e8", "bwd-sm2"]
    assert variant_impls("fwd", vs) == [
        "fused",
        "fused@fwd-r2",
        "fused@fwd-e8",
        "fused-f32out",
        "fused-f32out@fwd-r2",
        "fused-f32out@fwd-e8",
    ]
    assert variant_impls("bwd", vs) == [
        "fused",
        "fused@bwd-sm2",
        "fused-f32out",
        "fused-f32out@bwd-sm2",
    ]

    def row(impl, op, ms, out="bfloat16", hb=()):
        key = dict(impl=impl, op=op, B=1, N=65536, D=1536, dtype="bfloat16", out_dtype=out)
        return summary_row(key, [ms], 10**8, 4000.0, spin_ms=1.0, host_ms=hb or [0.1])

    rows = [
        row("fused", "fwd", 0.10),
        row("fused@fwd-r2", "fwd", 0.08),
        row("fused@fwd-e8", "fwd", 0.12, hb=[3.0]),
        row("eager", "fwd", 0.50),
        row("compile-eager", "fwd", 0.20),
        row("fused-f32out", "fwd", 0.15, "float32"),
        row("fused-f32out@fwd-r2", "fwd", 0.12, "float32"),
        row("wan-eager", "fwd", 1.50, "float32"),
        row("compile-wan", "fwd", 0.30, "float32"),
        row("fused-dtile", "bwd", 0.40),
        row("fused", "bwd", 0.20),
        row("fused@bwd-sm2", "bwd", 0.25),
        row("fused-slices", "bwd", 0.22),
    ]
    # fp32 x: fused and fused-f32out are both fp32 out (the H200 run of 2026-12-01 crashed here)
    f32x = [
        dict(r, dtype="float32", out_dtype="float32")
        for r in rows
        if r["impl"] in ("fused", "fused-f32out", "fused@fwd-r2", "fused-f32out@fwd-r2")
        and r["op"] == "fwd"
    ]
    t32 = variant_table(f32x)
    assert len(t32) == 1 and t32.iloc[0]["default"] == f32x[0]["pct_copy_bw"]
    t = variant_table(rows).set_index(["op", "out_dtype"])
    bf = t.loc[("fwd", "bfloat16")]
    assert bf["best"] == "fwd-r2" and bf["best_x_default"] == 1.25
    assert bf["x_eager"] == 6.25 and bf["x_compile-eager"] == 2.5
    assert bf["fwd-r2"] == round(100 * (1e8 / 0.08e-3 / 1e9) / 4000.0, 1)
    assert bf["host_bound_reps"] == 1  # fwd-e8's one repetition past the spin
    f32 = t.loc[("fwd", "float32")]
    assert f32["best"] == "fwd-r2" and f32["x_wan-eager"] == 12.5 and f32["x_compile-wan"] == 2.5
    bw = t.loc[("bwd", "bfloat16")]  # dtile rows are not variants; the default stays best here
    assert bw["best"] == "default" and bw["best_x_default"] == 1.0 and len(t) == 3
    assert bw["slices"] == round(100 * (1e8 / 0.22e-3 / 1e9) / 4000.0, 1)  # its own column


def test_bench_impl_selects_variant_per_call():
    from lab import variants
    from lab.variant_sweep import _impl

    x, e = torch.randn(1, 4, 64), torch.randn(1, 6, 64)
    prev = variants.get_variant()
    try:
        y = _impl("fused@fwd-v4")(x, e)
        assert variants.get_variant() == "fwd-v4"
        torch.testing.assert_close(y, _impl("fused")(x, e))
        assert variants.get_variant() == variants.ENV_VARIANT
        assert _impl("fused-f32out@bwd-sm2")(x.bfloat16(), e).dtype == torch.float32
    finally:
        variants.set_variant(prev)


def test_bench_cli_rejects_an_empty_selection_before_timing(tmp_path):
    """--widths / --ops that select nothing stop with the reason, before any GPU work."""
    from lab import variant_sweep as bench

    with pytest.raises(SystemExit, match="nothing to time"):
        bench.main(["--out", str(tmp_path), "--profile", "full", "--widths", "999"])
    with pytest.raises(SystemExit, match="nothing to time"):
        bench.main(["--out", str(tmp_path), "--ops", "fwdd"])
    with pytest.raises(SystemExit, match="unknown variant"):
        bench.main(["--out", str(tmp_path), "--variants", "default,nope"])
