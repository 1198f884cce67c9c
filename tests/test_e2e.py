"""suite.experiments.e2e: kernel families, paired speedups and their CI, the metric keys, figures,
registration and CLI (CPU); a 1-block smoke run of the real loop on a GPU."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from suite import experiments
from suite.claims import claims_of
from suite.experiments import e2e


@pytest.mark.parametrize(
    "name,family",
    [
        ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128>>", "attention"),
        ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn>", "gemm"),
        ("nvjet_tst_192x192_64x3_2x1_v_bz_coopB_TNT", "gemm"),
        ("adaln_fwd_r2", "adaln/epilogue"),
        ("void at::native::elementwise_kernel<128, 2, at::native::direct_copy_kernel_cuda>", "copy/cast"),
        ("triton_per_fused__to_copy_native_layer_norm_0", "reduction/norm"),
        ("triton_red_fused_native_layer_norm_backward_3", "reduction/norm"),
        ("triton_poi_fused_add_mul_2", "elementwise"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>", "elementwise"),
        ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>", "reduction/norm"),
        ("triton_poi_fused__to_copy_mul_1", "elementwise"),
        ("stream_convert_bf16", "other"),
    ],
)  # fmt: skip
def test_kernel_family(name, family):
    assert e2e.kernel_family(name) == family


def _steps(times: dict[str, list[float]], shape="v81x480") -> pd.DataFrame:
    rows = []
    for v, ts in times.items():
        for r, t in enumerate(ts):
            rows.append(dict(model="wan-1.3b", shape=shape, batch=1, frames=81, height=480, width=832, S=32760,
                             layers=30, variant=v, rep=r, order=0, seconds=t, peak_gib=1.0))  # fmt: skip
    return pd.DataFrame(rows)


def test_paired_speedup_cancels_drift():
    base = np.array([2.0, 2.4, 2.8, 3.2])  # drifting machine
    new = base / 1.25
    value, lo, hi = e2e.paired_speedup(base, new)
    assert value == pytest.approx(1.25) and lo == pytest.approx(1.25) and hi == pytest.approx(1.25)
    v2, lo2, hi2 = e2e.paired_speedup([2.0, 2.1], [1.0, 1.1])
    assert v2 == pytest.approx((2.0 + 2.1 / 1.1) / 2) and np.isnan(lo2) and np.isnan(hi2)


def test_paired_speedup_is_the_median_pair_one_slow_repeat_does_not_move_it():
    base = np.full(6, 2.6)
    new = np.array([2.5, 2.5, 2.5, 2.5, 2.5, 5.0])  # one host stall in the new arm
    value, lo, hi = e2e.paired_speedup(base, new)
    assert value == pytest.approx(2.6 / 2.5)  # a ratio of means would read 2.6 / 2.917
    assert lo <= value <= hi and hi == pytest.approx(2.6 / 2.5)


def test_summarize_metric_keys_and_values():
    t = _steps({"eager": [2.6, 2.7, 2.5], "eager-adaln": [2.5, 2.6, 2.4],
                "compile": [2.2, 2.2, 2.1], "compile-fused": [2.0, 2.1, 2.0]})  # fmt: skip
    m = e2e.summarize({"e2e_steps": t}).set_index("metric")
    assert set(m.index) == {
        "e2e_gain_eager_adaln_v81x480",
        "e2e_gain_compile_v81x480",
        "e2e_gain_compile_fused_v81x480",
        "e2e_gain_fused_over_compile_v81x480",
    }
    assert (m.claim == "C17").all()
    row = m.loc["e2e_gain_compile_v81x480"]
    assert row.value == pytest.approx((2.5 / 2.1 - 1) * 100) and row.unit == "%"  # median pair
    assert row.ci_low <= row.value <= row.ci_high
    assert m.loc["e2e_gain_fused_over_compile_v81x480"].value == pytest.approx(
        (2.1 / 2.0 - 1) * 100  # pairs 2.2/2.0, 2.2/2.1, 2.1/2.0: median 1.05
    )
    assert "30 blocks" in row.conditions and "S=32760" in row.conditions
    assert e2e.summarize({}).empty


def test_figures_from_tables():
    from suite.report.plots import e2e as plots

    steps = pd.concat([_steps({"eager": [2.0, 2.0], "eager-adaln": [1.9, 1.8]}),
                       _steps({"eager": [0.5, 0.5], "eager-adaln": [0.4, 0.4]}, "img480x8")])  # fmt: skip
    mem = pd.DataFrame(dict(shape=["v81x480"] * 2, variant=["eager", "eager-adaln"],
                            peak_gib=[7.6, 7.0], status="ok"))  # fmt: skip
    prof = pd.DataFrame(dict(shape="v81x480", variant=["eager", "eager", "eager-adaln"],
                             family=["attention", "gemm", "attention"], gpu_us=[5e5, 3e5, 5e5],
                             kernel=["a", "b", "a"], calls=1))  # fmt: skip
    figs = plots.figures({"e2e_steps": steps, "e2e_memory": mem, "e2e_profile": prof}, None)
    assert [f[0] for f in figs] == ["e2e_steps", "e2e_memory", "e2e_profile"]
    assert plots.figures({}, None) == []


def test_registered_needs_cuda_and_plans_are_valid():
    assert experiments.REGISTRY["e2e"] == "suite.experiments.e2e"
    assert e2e.NEEDS == "cuda" and claims_of("e2e") == ("C17",)
    full = e2e.PLANS["full"]
    assert set(full.shapes) == set(e2e.SHAPES) and set(full.variants) == set(e2e.VARIANTS)
    assert full.repeats >= 3
    for plan in e2e.PLANS.values():
        assert set(plan.shapes) <= set(e2e.SHAPES) and e2e.BASELINE in plan.variants
    assert e2e.ops_label(e2e.VARIANTS["eager"]) == "diffusers"
    assert e2e.ops_label(e2e.VARIANTS["eager-epilogues"]) == "adaln+epilogues"


def test_cli_help(capsys):
    with pytest.raises(SystemExit) as ex:
        e2e.main(["--help"])
    assert ex.value.code == 0
    assert "--repeats" in capsys.readouterr().out


def test_e2e_loop_cpu_tiny(tmp_path, monkeypatch):
    """The warm-up / interleaved-repeat loop and its tables, on CPU at the tiny config and a
    tiny shape (no peak memory or profiler off CUDA)."""
    from suite.rundir import RunContext, RunDir

    monkeypatch.setitem(e2e.SHAPES, "t", e2e.Shape(batch=2, frames=5, height=32, width=32))
    opts = dict(model="tiny", shapes=["t"], variants=["eager", "eager-adaln"], repeats=3)
    t = e2e.run(RunContext(RunDir(tmp_path), "full", "cpu", options={"e2e": opts}))
    s, m = t["e2e_steps"], t["e2e_memory"]
    assert len(s) == 6 and (s.seconds > 0).all() and (s.S == 8).all() and (s.layers == 2).all()
    assert list(s.variant) == [
        "eager",
        "eager-adaln",
        "eager-adaln",
        "eager",
        "eager",
        "eager-adaln",
    ]
    assert list(m.status) == ["ok", "ok"] and list(m.ops) == ["diffusers", "adaln"]
    assert t["e2e_profile"].empty
    row = e2e.summarize(t).iloc[0]
    assert row.metric == "e2e_gain_eager_adaln_t" and "tiny, 2 blocks" in row.conditions
    with pytest.raises(ValueError, match="e2e shapes must be among"):
        e2e.run(RunContext(RunDir(tmp_path), "full", "cpu", options={"e2e": {"shapes": ["4k"]}}))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_e2e_smoke_gpu(tmp_path):
    from suite.rundir import RunContext, RunDir

    opts = dict(shapes=["img480x8"], variants=["eager", "eager-adaln"], repeats=2, layers=1,
                profile=["img480x8"])  # fmt: skip
    ctx = RunContext(RunDir(tmp_path), "full", "cuda", options={"e2e": opts})
    t = e2e.run(ctx)
    s, m, p = t["e2e_steps"], t["e2e_memory"], t["e2e_profile"]
    assert len(s) == 4 and (s.seconds > 0).all() and set(s.rep) == {0, 1}
    assert (m.peak_gib > m.param_gib).all()
    fam = p.groupby(["variant", "family"]).gpu_us.sum()
    assert fam["eager-adaln"]["adaln/epilogue"] > 0 and "adaln/epilogue" not in fam["eager"]
    assert fam["eager"]["attention"] > 0 and fam["eager"]["gemm"] > 0
    assert len(e2e.summarize(t)) == 1
