"""The kernel claims a GPU measures (C11, C12, C13, C16), measured by the suite's own experiments
on this GPU, agree with the committed quick reference of the same GPU model.

- C11 (fwd_speedup_wan) and C12 (bwd_dtile_speedup_wan): suite.experiments.kernels.bench.measure
  at the claims' shapes only (bf16 x, B = 1, N = 65536, the three Wan widths) with only the impls
  the two primary metrics compare, read by suite.experiments.kernels.summarize: inside the
  reference's interval (which holds the between-run spread too).
- C13 (saved_mem_reduction_wan, saved_mem_gb_wan) and C16 (kernels_fused_fwd):
  suite.experiments.opmemory as the quick profile runs it: equal to the reference's.

Without CUDA the measuring test skips; the reading of each claim's ledger primary is checked on
the committed rows.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
# the quick reference each GPU model's measurement is held to
REFERENCES = {
    "H100": ROOT / "reports/reference/h100/quick-c2036da",
    "H200": ROOT / "reports/reference/h200/quick-5753865",
}
SPEEDUP_CLAIMS = ["C11", "C12"]
MEMORY_CLAIM, KERNELS_CLAIM = "C13", "C16"
# the impls the primary metrics of C11 and C12 compare (suite.experiments.kernels' specs)
FWD_IMPLS = ("fused-f32out", "wan-eager")
BWD_IMPLS = ("fused-dtile-f32out", "wan-eager")
REPS = 30  # the quick profile's repetitions


def primary(claim: str) -> str:
    from suite.claims import load_claims

    return next(c.primary[0] for c in load_claims() if c.id == claim)


def row(metrics, claim: str, metric: str | None = None) -> dict:
    """The metric row of `claim` (its ledger primary unless `metric`), finite, as a dict."""
    metric = metric or primary(claim)
    rows = metrics[(metrics.claim == claim) & (metrics.metric == metric)]
    if rows.empty or not math.isfinite(float(rows.value.iloc[0])):
        raise ValueError(f"{claim}: this run gave no value of {metric!r}")
    return rows.iloc[0].to_dict()


def measure_speedups():
    """kernels' metric rows from a timing of the claims' shapes and impls only (~10-20 s)."""
    from suite.experiments import kernels
    from suite.experiments.kernels import bench

    shapes = [(1, kernels.CLAIM_N, D, "bfloat16") for D in kernels.WAN_WIDTHS]
    raw, rows = bench.measure(shapes, FWD_IMPLS, BWD_IMPLS, REPS, log=lambda _: None)
    return kernels.summarize(kernels.tables_of(raw, rows))


def measure_opmemory(tmp: Path):
    """opmemory's metric rows, its quick-profile run in a scratch run directory."""
    from suite.experiments import opmemory
    from suite.rundir import RunContext, RunDir

    return opmemory.summarize(opmemory.run(RunContext(RunDir(tmp), "quick", "cuda")))


def test_each_claim_reads_its_ledger_primary():
    import json

    ref = REFERENCES["H200"]
    metrics = pd.read_csv(ref / "metrics.csv")
    claims = {c["id"]: c for c in json.loads((ref / "claims.json").read_text())}
    for cid in SPEEDUP_CLAIMS + [MEMORY_CLAIM, KERNELS_CLAIM]:
        r = row(metrics, cid)
        assert r["metric"] == claims[cid]["metric"], cid
        assert r["value"] == pytest.approx(claims[cid]["measured"]), cid
        if cid in SPEEDUP_CLAIMS:
            assert r["ci_low"] <= r["value"] <= r["ci_high"], cid


def test_a_claim_the_run_did_not_give_raises():
    metrics = pd.read_csv(REFERENCES["H200"] / "metrics.csv")
    with pytest.raises(ValueError, match="C11: this run gave no value of 'fwd_speedup_wan'"):
        row(metrics[metrics.metric != "fwd_speedup_wan"], "C11")


def test_the_committed_h100_measurement_agrees_with_that_gpus_reference():
    """This method's one committed GPU measurement (taken through asv on one H100, kept in
    reports/asv/h100) inside the H100 reference's intervals, memory and kernel count equal."""
    from benchmarks.run_asv import load_results

    metrics = pd.read_csv(REFERENCES["H100"] / "metrics.csv")
    saved = load_results("b33b3cb7", "h100", ROOT / "reports/asv")
    name = "bench_kernel_claims.{}.track_{}"
    for cid in SPEEDUP_CLAIMS:
        value = saved[name.format("KernelSpeedupClaims", f"speedup['{cid}']")]["value"]
        r = row(metrics, cid)
        assert r["ci_low"] <= value <= r["ci_high"], cid
    mem = saved[name.format("OpMemoryClaims", "saved_mem_reduction")]["value"]
    assert mem == pytest.approx(row(metrics, MEMORY_CLAIM)["value"])
    gb = saved[name.format("OpMemoryClaims", "saved_gb")]["value"]
    assert gb == pytest.approx(row(metrics, MEMORY_CLAIM, "saved_mem_gb_wan")["value"])
    kernels = saved[name.format("OpMemoryClaims", "kernels_per_call")]["value"]
    assert kernels == row(metrics, KERNELS_CLAIM)["value"]


@pytest.mark.gpu
def test_this_gpu_measures_the_kernel_claims_of_its_reference(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    gpu = torch.cuda.get_device_name(0)
    model = next((m for m in REFERENCES if m in gpu), None)
    if model is None:
        pytest.skip(f"no committed quick reference for {gpu}")
    ref = pd.read_csv(REFERENCES[model] / "metrics.csv")
    speedups = measure_speedups()
    for cid in SPEEDUP_CLAIMS:
        got, want = row(speedups, cid), row(ref, cid)
        assert want["ci_low"] <= got["value"] <= want["ci_high"], (cid, got["value"], want)
    memory = measure_opmemory(tmp_path)
    for cid, metric in ((MEMORY_CLAIM, None), (MEMORY_CLAIM, "saved_mem_gb_wan")):
        got, want = row(memory, cid, metric), row(ref, cid, metric)
        assert got["value"] == pytest.approx(want["value"], rel=1e-3), (cid, metric)
    assert row(memory, KERNELS_CLAIM)["value"] == row(ref, KERNELS_CLAIM)["value"]
