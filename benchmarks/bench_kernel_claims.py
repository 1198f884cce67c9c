"""asv `track_` benchmarks of the kernel claims a GPU measures in seconds (skipped without CUDA),
each returning the claim's primary metric as the suite's own experiments compute it, so asv's
history shows the commit that moved a kernel claim's value:

- C11 (fwd_speedup_wan) and C12 (bwd_dtile_speedup_wan): suite.experiments.kernels.bench.measure
  at the claims' shapes only (bf16 x, B = 1, N = 65536, the three Wan widths) with only the impls
  the two primary metrics compare (the fused fp32-output forward and D-tile backward, the Wan 2.1
  path), read by suite.experiments.kernels.summarize: the geometric mean over the widths of the
  median-time speedup, and its 95% interval (repetition noise of this run); ~10-20 s.
- C13 (saved_mem_reduction_wan, and the GB saved, saved_mem_gb_wan) at N = 64000, D = 5120, and
  C16 (kernels_fused_fwd, CUDA kernels per fused forward call): suite.experiments.opmemory's run
  and summarize, as the quick profile runs them; a few seconds.

The metric of each claim is its ledger primary (suite.claims); a track raises when this run did not
give it. Direction for benchmarks/run_asv.py's regression check: speedup, reduction and saved are
higher-is-better; track_kernels_per_call is lower-is-better.
"""

from __future__ import annotations

import math

from benchmarks.common import gpu_available, require_gpu

SPEEDUP_CLAIMS = ["C11", "C12"]
MEMORY_CLAIM, KERNELS_CLAIM = "C13", "C16"
# the impls the primary metrics of C11 and C12 compare (suite.experiments.kernels' specs)
FWD_IMPLS = ("fused-f32out", "wan-eager")
BWD_IMPLS = ("fused-dtile-f32out", "wan-eager")
REPS = 30  # the quick profile's repetitions


def primary(claim: str) -> str:
    from suite.claims import load_claims

    return next(c.primary[0] for c in load_claims() if c.id == claim)


def _row(metrics, claim: str, metric: str | None = None) -> dict:
    """The metric row of `claim` (its ledger primary unless `metric`), finite, as a dict."""
    metric = metric or primary(claim)
    rows = metrics[(metrics.claim == claim) & (metrics.metric == metric)]
    if rows.empty or not math.isfinite(float(rows.value.iloc[0])):
        raise ValueError(f"{claim}: this run gave no value of {metric!r}")
    return rows.iloc[0].to_dict()


def measure_speedups():
    """kernels' metric rows from a timing of the claims' shapes and impls only."""

    from suite.experiments import kernels
    from suite.experiments.kernels import bench

    shapes = [(1, kernels.CLAIM_N, D, "bfloat16") for D in kernels.WAN_WIDTHS]
    raw, rows = bench.measure(shapes, FWD_IMPLS, BWD_IMPLS, REPS, log=lambda _: None)
    return kernels.summarize(kernels.tables_of(raw, rows))


def measure_opmemory():
    """opmemory's metric rows, its quick-profile run in a scratch run directory."""
    import tempfile

    from suite.experiments import opmemory
    from suite.rundir import RunContext, RunDir

    with tempfile.TemporaryDirectory(prefix="opmemory-") as tmp:
        ctx = RunContext(RunDir(tmp), "quick", "cuda")
        return opmemory.summarize(opmemory.run(ctx))


class KernelSpeedupClaims:
    """C11 and C12: the fused op's median-time speedup over the Wan 2.1 path, with its interval."""

    version = 1
    timeout = 600
    params = (SPEEDUP_CLAIMS,)
    param_names = ["claim"]

    def setup_cache(self):
        # never None: asv passes the cache to setup and the benchmarks only when it is not None
        if not gpu_available():
            return {"gpu": False}
        metrics = measure_speedups()
        return {c: _row(metrics, c) for c in SPEEDUP_CLAIMS}

    def setup(self, cache, claim):
        require_gpu()

    def track_speedup(self, cache, claim):
        return cache[claim]["value"]

    def track_speedup_ci_low(self, cache, claim):
        return cache[claim]["ci_low"]

    def track_speedup_ci_high(self, cache, claim):
        return cache[claim]["ci_high"]

    track_speedup.unit = track_speedup_ci_low.unit = track_speedup_ci_high.unit = "x"


class OpMemoryClaims:
    """C13: the share of the Wan path's saved-for-backward bytes the fused op saves, and the GB
    saved, at N = 64000, D = 5120; C16: CUDA kernels per fused forward call."""

    version = 1
    timeout = 300

    def setup_cache(self):
        if not gpu_available():
            return {"gpu": False}
        metrics = measure_opmemory()
        return {
            "reduction": _row(metrics, MEMORY_CLAIM)["value"],
            "gb": _row(metrics, MEMORY_CLAIM, "saved_mem_gb_wan")["value"],
            "kernels": _row(metrics, KERNELS_CLAIM)["value"],
        }

    def setup(self, cache):
        require_gpu()

    def track_saved_mem_reduction(self, cache):
        return cache["reduction"]

    def track_saved_gb(self, cache):
        return cache["gb"]

    def track_kernels_per_call(self, cache):
        return cache["kernels"]

    track_saved_mem_reduction.unit = "%"
    track_saved_gb.unit = "GB"
    track_kernels_per_call.unit = "kernels"
