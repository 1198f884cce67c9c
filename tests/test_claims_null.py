"""A before -> after claim is not met by an 'after' that is no better than the measured 'before'."""

import math

from suite.claims import judge, load_claims

CLAIMS = {c.id: c for c in load_claims()}


def test_lower_is_better_with_worse_after_than_before_is_not_reproduced():
    c5 = CLAIMS["C5"]  # paper 39% -> 18.9%, null = measured baseline
    assert judge(c5, 9.94, baseline=9.57) == "not-reproduced"
    assert judge(c5, 9.94, baseline=20.0) == "exceeded"
    assert judge(c5, 18.0, baseline=30.0) == "reproduced"
    assert judge(c5, 25.0, baseline=30.0) == "partial"


def test_higher_is_better_at_or_below_null_is_not_reproduced():
    c7 = CLAIMS["C7"]  # +25.6%, null 0
    assert judge(c7, 0.0) == "not-reproduced"
    assert judge(c7, -3.0) == "not-reproduced"
    assert judge(c7, 3.0) == "partial"
    assert judge(c7, 26.0) == "reproduced"
    assert judge(c7, 40.0) == "exceeded"


def test_missing_baseline_falls_back_to_paper_comparison():
    assert judge(CLAIMS["C6"], 5.0, baseline=math.nan) == "exceeded"
