"""benchmarks/bench_kernel_claims.py: the GPU kernel claims' asv benchmarks import without CUDA and
skip there; each reads its claim's ledger primary from the suite's own metric rows (here the
committed quick reference's, standing in for a GPU run); run_asv knows which way each is better."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from benchmarks import bench_kernel_claims as bench
from benchmarks import run_asv

REFERENCE = Path(__file__).resolve().parents[1] / "reports/reference/h200/quick-5753865"


@pytest.fixture(scope="module")
def committed():
    metrics = pd.read_csv(REFERENCE / "metrics.csv")
    claims = {c["id"]: c for c in json.loads((REFERENCE / "claims.json").read_text())}
    return metrics, claims


def test_without_cuda_the_benchmarks_skip(monkeypatch):
    monkeypatch.setattr(bench, "gpu_available", lambda: False)
    monkeypatch.setattr("benchmarks.common.gpu_available", lambda: False)
    for cls, args in ((bench.KernelSpeedupClaims, ("C11",)), (bench.OpMemoryClaims, ())):
        b = cls()
        cache = b.setup_cache()
        assert cache == {"gpu": False}  # not None: asv would skip the benchmarks unannounced
        with pytest.raises(NotImplementedError, match="needs a CUDA GPU"):
            b.setup(cache, *args)


def test_each_track_reads_the_ledger_primary(committed):
    metrics, claims = committed
    for cid in bench.SPEEDUP_CLAIMS + [bench.MEMORY_CLAIM, bench.KERNELS_CLAIM]:
        row = bench._row(metrics, cid)
        assert row["metric"] == claims[cid]["metric"], cid
        assert row["value"] == pytest.approx(claims[cid]["measured"]), cid
    cache = {c: bench._row(metrics, c) for c in bench.SPEEDUP_CLAIMS}
    b = bench.KernelSpeedupClaims()
    assert b.track_speedup_ci_low(cache, "C11") <= b.track_speedup(cache, "C11")
    assert b.track_speedup(cache, "C11") <= b.track_speedup_ci_high(cache, "C11")


def test_a_claim_the_run_did_not_give_raises(committed):
    metrics, _ = committed
    with pytest.raises(ValueError, match="C11: this run gave no value of 'fwd_speedup_wan'"):
        bench._row(metrics[metrics.metric != "fwd_speedup_wan"], "C11")


def test_run_asv_reads_the_direction_of_each_track():
    def worse(name, base, head):
        return run_asv.regressions({name: (base,) * 3}, {name: (head,) * 3}, 1.10)

    cls = "bench_kernel_claims.KernelSpeedupClaims"
    assert worse(f"{cls}.track_speedup[C11]", 10.0, 8.0)  # a lower speedup regresses
    assert not worse(f"{cls}.track_speedup[C11]", 8.0, 10.0)
    assert worse("bench_kernel_claims.OpMemoryClaims.track_saved_mem_reduction", 75.0, 60.0)
    assert worse("bench_kernel_claims.OpMemoryClaims.track_kernels_per_call", 1.0, 3.0)


def test_the_committed_gpu_point_agrees_with_that_gpus_reference():
    """The first GPU point of these tracks (reports/asv/h100, one H100) measured what the H100 quick
    reference measured: each speedup inside the reference's interval, each memory and kernel count
    equal, and the names are the ones asv saved (a renamed track starts a new, empty series)."""
    ref = Path(__file__).resolve().parents[1] / "reports/reference/h100/quick-c2036da"
    metrics = pd.read_csv(ref / "metrics.csv")
    saved = run_asv.load_results("b33b3cb7", "h100", run_asv.ROOT / "reports/asv")
    cls = "bench_kernel_claims"
    for cid in bench.SPEEDUP_CLAIMS:
        row = bench._row(metrics, cid)
        value = saved[f"{cls}.KernelSpeedupClaims.track_speedup['{cid}']"][0]
        low = saved[f"{cls}.KernelSpeedupClaims.track_speedup_ci_low['{cid}']"][0]
        high = saved[f"{cls}.KernelSpeedupClaims.track_speedup_ci_high['{cid}']"][0]
        assert low <= value <= high, cid
        assert row["ci_low"] <= value <= row["ci_high"], cid
    assert saved[f"{cls}.OpMemoryClaims.track_saved_mem_reduction"][0] == pytest.approx(
        bench._row(metrics, bench.MEMORY_CLAIM)["value"]
    )
    assert saved[f"{cls}.OpMemoryClaims.track_saved_gb"][0] == pytest.approx(
        bench._row(metrics, bench.MEMORY_CLAIM, "saved_mem_gb_wan")["value"]
    )
    assert (
        saved[f"{cls}.OpMemoryClaims.track_kernels_per_call"][0]
        == bench._row(metrics, bench.KERNELS_CLAIM)["value"]
    )
