"""CPU tests of the kernel benchmark harness (bytes model, GPU spin, summary rows) and of the
claims and figures computed from the committed H200 kernel grid."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

# ----------------------------------------------------------------------------- claims pipeline
REF = Path(__file__).resolve().parent.parent / "reports" / "reference" / "h200"
GRID = REF / "kernels-a1294db"  # the full kernel grid


@pytest.mark.skipif(not (GRID / "kernels.csv").is_file(), reason="no committed H200 reference run")
def test_claim_metrics_and_figures_from_committed_h200_run():
    import pandas as pd

    from suite.experiments import kernels, opmemory
    from suite.report.plots import kernels as pk
    from suite.report.plots import opmemory as po

    t = pd.read_csv(GRID / "kernels.csv")
    assert set(kernels.REFERENCE_COLUMNS) <= set(t.columns)
    m = kernels.summarize({"kernels_timings": t})
    keys = {
        "fwd_speedup_wan",
        "fwd_speedup_eager",
        "fwd_speedup_compile_wan",
        "fwd_speedup_compile_eager",
        "bwd_dtile_speedup_wan",
        "bwd_fused_speedup_wan",
        "bwd_dtile_speedup_eager",
        "bwd_fused_speedup_compile_wan",
    }
    assert keys <= set(m.metric) and m.value.notna().all()
    tabs = {
        n: pd.read_csv(REF / "quick-5753865" / "results" / f"{n}.csv")
        for n in ("opmemory_saved", "opmemory_kernels")
    }
    m2 = opmemory.summarize(tabs)
    assert {
        "saved_mem_reduction_wan",
        "saved_mem_reduction_eager",
        "saved_mem_gb_wan",
        "kernels_fused_fwd",
        "kernels_wan_fwd",
        "kernels_eager_fwd",
        "kernels_fused_bwd",
    } <= set(m2.metric)
    figs = pk.figures({"kernels_timings": t}, m) + po.figures(tabs, m2)
    assert [f[0] for f in figs] == [
        "kernels_bandwidth",
        "kernels_speedup",
        "opmemory_saved",
        "opmemory_kernels",
    ]
    # the committed grid has the same-size copy: every panel draws it; a table without it draws none
    labels = lambda fig: [ln.get_label() for ax in fig.axes for ln in ax.get_lines()]  # noqa: E731
    n_panels = len(figs[0][2].axes)
    assert labels(figs[0][2]).count("copy, same bytes") == n_panels
    old = pk.bandwidth_figure(t.drop(columns=["copy_same_gbps"]))
    assert "copy, same bytes" not in labels(old)


# ----------------------------------------------------------------------------- timing harness (CPU)
def test_bytes_model_floors():
    from suite.experiments.kernels.traffic import bytes_model

    B, N, D = 1, 65536, 1536
    # perf-notes byte floors: fwd bf16 out 4 B/elem, fp32 out 6; bwd bf16 dy 6, fp32 dy 8
    assert bytes_model("fwd", B, N, D, 2, 2) == 4 * B * N * D + 2 * B * D * 4 + 8 * B * N
    assert bytes_model("fwd", B, N, D, 2, 4) - bytes_model("fwd", B, N, D, 2, 2) == 2 * N * D
    assert bytes_model("bwd", B, N, D, 2, 2) == 6 * N * D + 8 * N + 4 * D * 4
    assert bytes_model("bwd", 2, N, D, 2, 4) == 2 * (8 * N * D + 8 * N + 4 * D * 4)


def test_spin_covers_host_time():
    from suite.experiments.kernels.bench import spin_cycles

    cpm = 2.0e6  # cycles per ms
    assert spin_cycles(0.1, cpm, 2_000_000) == 2_000_000  # the minimum (1 ms) covers 0.1 ms
    assert spin_cycles(0.6, cpm, 2_000_000) == int(2 * 0.6 * cpm)  # 2x a 0.6 ms backward
    assert spin_cycles(0.6, cpm, 2_000_000, margin=3.0) == int(3 * 0.6 * cpm)
    assert spin_cycles(1e4, cpm, 2_000_000) == int(20 * cpm)  # capped at 20 ms
    assert spin_cycles(-1.0, cpm, 0) == 0


def test_timer_rejects_an_unknown_flush_before_touching_the_gpu():
    from suite.experiments.kernels.bench import Timer

    with pytest.raises(ValueError, match="flush='clean'"):
        Timer(3, flush="clean")


def test_summary_row_counts_host_bound_reps():
    from suite.experiments.kernels.bench import summary_row

    key = dict(impl="fused", op="bwd", B=1, N=4096, D=1536, dtype="bfloat16", out_dtype="bfloat16")
    ms = [0.010, 0.012, 0.011, 0.013, 0.5]
    r = summary_row(key, ms, 10**7, 4000.0, "", spin_ms=1.0, host_ms=[0.5, 0.6, 1.2, 0.4, 2.0])
    assert r["ms_median"] == 0.012 and r["reps"] == 5 and r["host_bound_reps"] == 2
    assert abs(r["gbps"] - 1e7 / 0.012e-3 / 1e9) < 1e-6
    assert abs(r["pct_copy_bw"] - 100 * r["gbps"] / 4000.0) < 1e-9
    assert r["ms_p25"] <= r["ms_median"] <= r["ms_p75"] and r["host_ms_median"] == 0.6
    assert set(key) <= set(r) and r["spin_ms"] == 1.0
    r1 = summary_row(key, [0.02], 10**6, 4000.0, copy_same_gbps=100.0)
    assert r1["ms_p25"] == r1["ms_p75"] == 0.02 and r1["host_bound_reps"] == 0
    # 10**6 B in 0.02 ms = 50 GB/s: half of a same-size copy at 100; no copy given -> NaN
    assert abs(r1["pct_copy_same"] - 50.0) < 1e-9 and math.isnan(r["pct_copy_same"])


def test_bench_fused_slices_takes_the_slice_backward():
    """ "fused-slices" times the op with e's gradient through autograd's slice backward (the path
    before round 22), "fused" writes e's gradient whole: the same numbers, other graphs."""
    from suite.experiments.kernels.bench import _impl

    x = torch.randn(2, 5, 64, requires_grad=True)
    e = torch.randn(2, 6, 64, requires_grad=True)
    y, ys = _impl("fused")(x, e), _impl("fused-slices")(x, e)
    assert type(y.grad_fn).__name__ == "_EagerAdaLNRowsBackward"
    assert type(ys.grad_fn).__name__ == "_EagerAdaLNBackward"
    dy = torch.randn_like(y)
    for a, b in zip(torch.autograd.grad(y, (x, e), dy), torch.autograd.grad(ys, (x, e), dy)):
        torch.testing.assert_close(a, b)


def test_kernels_after_shapes_cli_explains_and_refuses_without_gpu(tmp_path, capsys):
    """lab/kernels_after_shapes.py (lab/LOG.md, "Next measurements" item 4): --help names the
    modes; an unknown mode and a machine without CUDA stop with the reason, before any work."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "lab" / "kernels_after_shapes.py"
    spec = importlib.util.spec_from_file_location("kernels_after_shapes", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    with pytest.raises(SystemExit):
        tool.main(["--help"])
    assert "keep-cache" in capsys.readouterr().out
    with pytest.raises(SystemExit) as err:
        tool.main(["--mode", "bogus", "--out", str(tmp_path)])
    assert err.value.code == 2 and "invalid choice" in capsys.readouterr().err
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="needs a CUDA GPU"):
            tool.main(["--mode", "asis", "--out", str(tmp_path)])
        assert not (tmp_path / "asis.csv").exists()
