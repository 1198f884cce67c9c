"""benchmarks/bench_balance_claims.py: how a claim's value is read and checked against the committed
interval, and that a moved value fails. The recomputation itself (C1-C9 from the quick reference's
raw tables by the current code, ~1-2 min) is asv's run in CI (.ci/run: bench_balance_claims), which
fails where a value leaves its interval; here the committed metric rows stand in for it."""

from __future__ import annotations

import math

import pytest

from benchmarks import bench_balance_claims as bench


@pytest.fixture(scope="module")
def cache():
    return bench.claim_values(bench.committed_rows())


def test_every_cpu_claim_is_read_and_checked_against_its_committed_interval(cache):
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
