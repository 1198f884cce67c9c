"""benchmarks/bench_balance_claims.py: the CPU claims recomputed from a committed reference's raw
tables by the current code stay within their committed intervals, and a moved value fails."""

from __future__ import annotations

import math

import pytest

from benchmarks import bench_balance_claims as bench


@pytest.fixture(scope="module")
def cache():
    return bench.ClaimValues().setup_cache()


def test_every_cpu_claim_is_tracked_within_its_committed_interval(cache):
    for claim in bench.CLAIMS:
        b = bench.ClaimValues()
        value = b.track_value(cache, claim)  # raises if it left its committed interval
        assert math.isfinite(value), claim
        assert b.track_ci_low(cache, claim) <= value <= b.track_ci_high(cache, claim), claim


def test_the_tracked_value_is_the_ledger_reading(cache):
    c5 = cache["C5"]  # rank_cv_sim read as its relative reduction from the equal-token level
    assert c5["metric"] == "rank_cv_sim" and c5["value"] > 50 > c5["raw"]
    assert cache["C1"]["metric"] == "r_tokens_steps"


def test_a_value_outside_its_committed_interval_fails(cache):
    moved = {**cache, "C8": {**cache["C8"], "raw": cache["C8"]["want"][1] + 1.0}}
    with pytest.raises(ValueError, match="C8: throughput_gain_16_sim = .* left its committed"):
        bench.ClaimValues().track_value(moved, "C8")
