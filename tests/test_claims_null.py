"""A before -> after claim is not met by an 'after' that is no better than the measured 'before'."""

import math

import pandas as pd
import pytest

from suite.claims import evaluate, judge, load_claims

CLAIMS = {c.id: c for c in load_claims()}


def test_lower_is_better_with_worse_after_than_before_is_not_reproduced():
    c16 = CLAIMS["C16"]  # 5-8 kernels -> 1, null = the measured baseline
    assert judge(c16, 7.0, baseline=6.5) == "not-reproduced"
    assert judge(c16, 3.0, baseline=6.5) == "partial"
    assert judge(c16, 1.0, baseline=6.5) == "reproduced"


def _c5(value, baseline):
    row = {"claim": "C5", "metric": "rank_cv_sim", "value": value, "ci_low": value - 0.1,
           "ci_high": value + 0.1, "baseline": baseline, "unit": "%"}  # fmt: skip
    return {v.id: v for v in evaluate(pd.DataFrame([row]))}["C5"]


def test_a_reduction_claim_reads_the_fall_from_the_measured_before_level():
    """C5 is judged on 1 - after / before against the paper's 1 - 18.9 / 39 = 51.5%."""
    assert _c5(9.94, 9.57).verdict == "not-reproduced"  # after above before: no reduction
    assert _c5(9.94, 20.0).verdict == "reproduced"  # a 50.3% reduction
    assert _c5(9.94, 40.0).verdict == "exceeded"  # 75%
    assert _c5(25.0, 30.0).verdict == "partial"  # 16.7%
    assert _c5(25.0, 30.0).measured == pytest.approx(100 / 6)


def test_higher_is_better_at_or_below_null_is_not_reproduced():
    c7 = CLAIMS["C7"]  # +25.6%, null 0
    assert judge(c7, 0.0) == "not-reproduced"
    assert judge(c7, -3.0) == "not-reproduced"
    assert judge(c7, 3.0) == "partial"
    assert judge(c7, 26.0) == "reproduced"
    assert judge(c7, 40.0) == "exceeded"


def test_a_reduction_without_a_measured_baseline_is_not_run():
    """Old: C6 without a baseline compared the level 5.0 with 10.4 and read exceeded."""
    v = _c5(5.0, math.nan)
    assert v.verdict == "not-run" and "no measured baseline" in v.reason
