"""The verdict rule of one claim: a measured value (and its 95% interval) against the paper's,
under the claim's row of claims.csv (suite.claims loads it and applies this to a run's metrics).

Point rule (columns `rule`, `direction`, `tolerance`, `null` of claims.csv), `judge()`. The
tolerance is relative, one fraction for every claim: a band of +-tolerance * |bound| around the
paper's value (or each end of its range), so 10% reads the same on a percentage, a speedup and R.
- compare/higher: exceeded if value > paper_high * (1 + tol); reproduced if value >=
  paper_low * (1 - tol); partial if it still beats the null (no-effect) value; else not-reproduced.
- compare/lower: the mirror image.  compare/match: reproduced if |value - paper| <= tol * |paper|.
- compare: a value that does not beat the null value is not-reproduced, whatever the paper says.
- upto/higher ("up to X": the paper's best case, an upper bound, not a point): reproduced when the
  bound is reached within tolerance (value, or the interval's high end, >= X * (1 - tol)) and the
  value is not well above it; exceeded when the whole interval lies above X * (1 + tol); partial
  when the whole interval beats the null but stays below X * (1 - tol) (an effect short of the
  paper's best case); not-reproduced when it does not beat the null.
- threshold/higher: reproduced if value > paper_value, else not-reproduced (qualitative claims);
  threshold/lower: reproduced if value <= paper_value.
`null` is a number, or "baseline" for the metric row's own measured before-value (taken as a point).

Interval rule (`assess()`, what a verdict is): the point rule's verdict stands only when the whole
95% interval [ci_low, ci_high] (widened to hold the value) gets that same verdict, i.e. no boundary
of the rule (null, the tolerance band's edges, the threshold) lies inside it; otherwise the
verdict is `inconclusive` and the reason names the boundary the interval straddles. An upto claim
reads the interval itself (above): it is inconclusive only where the interval straddles the null. A metric with
no interval keeps its verdict only if the ledger lists it in `exact` (deterministic quantities:
kernel counts, saved bytes, the longest sequence that fits, each the same in every run of a
commit); any other metric without an interval is `inconclusive` ("no interval"). A bootstrap's
interval ends carry a Monte Carlo standard error (the finite replicate count's); a verdict that a
boundary within MC_Z such errors of an end would change is `inconclusive` as well: the reason says
which end and boundary, and the interval shown stays the bootstrap's own.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from suite.claims import Claim


def _num(text: str) -> float:
    return float(text) if text.strip() else math.nan


_RULES = ("compare", "upto", "threshold")


def _edges(claim: Claim) -> tuple[float, float]:
    """(low edge, high edge) of the tolerance band: each end of the paper's range widened by the
    relative tolerance of its own magnitude (a value on an edge counts as in)."""
    p = claim.paper_value
    lo = claim.paper_low if math.isfinite(claim.paper_low) else p
    hi = claim.paper_high if math.isfinite(claim.paper_high) else p
    t = claim.tolerance + 1e-9
    return lo - t * abs(lo), hi + t * abs(hi)


def _null(claim: Claim, baseline: float) -> float:
    return baseline if claim.null == "baseline" else _num(claim.null or "")


def _upto(claim: Claim, lo: float, hi: float, baseline: float) -> str:
    """An "up to X" claim over the values [lo, hi] (a point: lo == hi); see the module doc."""
    reach, above = _edges(claim)
    null = _null(claim, baseline)
    if math.isfinite(null) and hi <= null:
        return "not-reproduced"
    if math.isfinite(null) and lo <= null:
        return "inconclusive"  # an interval on both sides of no effect
    if lo > above:
        return "exceeded"
    if hi >= reach:
        return "reproduced"
    return "partial" if math.isfinite(null) else "not-reproduced"


def judge(claim: Claim, value: float, baseline: float = math.nan) -> str:
    """The verdict for one measured value under the claim's rule."""
    if value is None or not math.isfinite(value):
        return "not-run"
    if claim.rule not in _RULES:
        raise ValueError(
            f"claims.csv: claim {claim.id} has rule {claim.rule!r}; accepted: {_RULES}"
        )
    p = claim.paper_value
    if claim.rule == "threshold":
        ok = value > p if claim.direction == "higher" else value <= p
        return "reproduced" if ok else "not-reproduced"
    if claim.direction == "match":
        return (
            "reproduced"
            if abs(value - p) <= (claim.tolerance + 1e-9) * abs(p)
            else "not-reproduced"
        )
    if claim.direction not in ("higher", "lower") or (
        claim.rule == "upto" and claim.direction != "higher"
    ):
        raise ValueError(f"claims.csv: claim {claim.id} has unknown direction {claim.direction!r}")
    if claim.rule == "upto":
        return _upto(claim, value, value, baseline)
    low_edge, high_edge = _edges(claim)
    null = _null(claim, baseline)
    # a claim of improvement is never met by a value that does not beat the no-effect value,
    # however close that value is to the paper's absolute number (e.g. CV 9.9% after vs 9.6% before)
    if math.isfinite(null) and (value <= null if claim.direction == "higher" else value >= null):
        return "not-reproduced"
    if claim.direction == "higher":
        if value > high_edge:
            return "exceeded"
        if value >= low_edge:
            return "reproduced"
        return "partial" if math.isfinite(null) and value > null else "not-reproduced"
    if value < low_edge:
        return "exceeded"
    if value <= high_edge:
        return "reproduced"
    return "partial" if math.isfinite(null) and value < null else "not-reproduced"


def boundaries(claim: Claim, baseline: float = math.nan) -> list[tuple[float, str]]:
    """The values at which judge()'s verdict changes, each with its name."""
    p = claim.paper_value
    if claim.rule == "threshold":
        return [(p, f"the threshold {p:g}")]
    low_edge, high_edge = _edges(claim)
    if claim.direction == "match":
        return [
            (low_edge, f"paper - tolerance = {low_edge:.4g}"),
            (high_edge, f"paper + tolerance = {high_edge:.4g}"),
        ]
    null = _null(claim, baseline)
    out = [(null, f"the no-effect value {null:g}")] if math.isfinite(null) else []
    if claim.direction == "higher":
        return out + [
            (low_edge, f"reproduced from {low_edge:.4g}"),
            (high_edge, f"exceeded above {high_edge:.4g}"),
        ]
    return out + [
        (high_edge, f"reproduced up to {high_edge:.4g}"),
        (low_edge, f"exceeded below {low_edge:.4g}"),
    ]


# an interval end within this many Monte Carlo SEs of a boundary is decided by the replicates
# drawn, not by the data (two-sided 95% for a normal Monte Carlo error)
MC_Z = 1.96


def _interval(claim: Claim, value: float, lo: float, hi: float, baseline: float, point: str):
    """(verdict, reason) of the interval [lo, hi] (holding value) under the interval rule."""
    if claim.rule == "upto":  # the interval itself is read: reaching the bound is enough
        verdict = _upto(claim, lo, hi, baseline)
        if verdict != "inconclusive":
            return verdict, ""
        return "inconclusive", (
            f"95% interval [{lo:.4g}, {hi:.4g}] straddles the no-effect value "
            f"(the value {value:.4g} alone reads {point})"
        )
    ends = {judge(claim, lo, baseline), judge(claim, hi, baseline)}
    cuts = boundaries(claim, baseline)
    if ends == {point} and not any(lo < x < hi for x, _ in cuts):
        return point, ""
    names = [name for x, name in cuts if lo <= x <= hi]
    return "inconclusive", (
        f"95% interval [{lo:.4g}, {hi:.4g}] straddles {' and '.join(names)} "
        f"(the value {value:.4g} alone reads {point})"
    )


def assess(
    claim: Claim,
    value: float,
    ci_low: float = math.nan,
    ci_high: float = math.nan,
    baseline: float = math.nan,
    exact: bool = False,
    mcse: tuple[float, float] = (math.nan, math.nan),
) -> tuple[str, str]:
    """(verdict, reason) under the interval rule: judge()'s verdict where the whole interval gets
    it (or the metric is exact and has none), else "inconclusive" with the boundary straddled.
    `mcse`: the Monte Carlo standard errors of (ci_low, ci_high) where the interval is a
    percentile over bootstrap replicates; a verdict that a boundary within MC_Z of them from an
    end would change is inconclusive too (the replicate count, not the data, decides it)."""
    point = judge(claim, value, baseline)
    if point == "not-run":
        return point, "no finite value"
    if not (math.isfinite(ci_low) and math.isfinite(ci_high)):
        if exact:
            return point, ""
        return "inconclusive", f"no interval (the value {value:.4g} alone reads {point})"
    lo, hi = min(ci_low, value), max(ci_high, value)
    verdict, reason = _interval(claim, value, lo, hi, baseline, point)
    reach = [MC_Z * e if math.isfinite(e) and e > 0 else 0.0 for e in mcse]
    if verdict == "inconclusive" or not any(reach):
        return verdict, reason
    if _interval(claim, value, lo - reach[0], hi + reach[1], baseline, point)[0] == verdict:
        return verdict, reason
    near = [
        f"its {end} end {x:.4g} lies {abs(b - x):.2g} from {name}, within {MC_Z} Monte Carlo SE "
        f"({e:.2g})"
        for end, x, e, r in (("low", lo, mcse[0], reach[0]), ("high", hi, mcse[1], reach[1]))
        for b, name in boundaries(claim, baseline)
        if math.isfinite(b) and abs(b - x) <= r
    ]
    return "inconclusive", (
        f"95% interval [{lo:.4g}, {hi:.4g}] reads {verdict}, but {' and '.join(near)}: the "
        f"bootstrap's replicate count, not the data, decides it (the value {value:.4g} alone "
        f"reads {point})"
    )
