"""The claims ledger and its verdict rules: every direction and rule, partial and baseline nulls,
all 18 ids, evaluate() on fake metric rows, not-run reasons."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pandas as pd
import pytest

from suite import experiments
from suite.claims import VERDICTS, evaluate, judge, load_claims

NAN = math.nan


@pytest.fixture(scope="module")
def ledger():
    return {c.id: c for c in load_claims()}


def claim(ledger, **kw):
    """A ledger claim with some fields replaced, to exercise one rule in isolation."""
    return replace(ledger["C4"], **kw)


# -- the ledger as data
def test_ledger_has_all_18_claims_in_order(ledger):
    assert list(ledger) == [f"C{i}" for i in range(1, 19)]


def test_ledger_rows_are_well_formed(ledger):
    for c in ledger.values():
        assert c.rule in ("compare", "threshold"), c.id
        assert c.direction in ("higher", "lower", "match"), c.id
        assert c.primary, f"{c.id} has no primary metric"
        assert math.isfinite(c.paper_value), c.id
        assert c.experiment in experiments.REGISTRY, c.id
        assert c.hardware in ("cpu", "cuda"), c.id
        assert c.definition and c.statement and c.unit, c.id
        assert c.null in ("", "baseline") or math.isfinite(float(c.null)), c.id
        assert c.tolerance >= 0, c.id


def test_every_claim_yields_each_verdict_reachable_or_not_run(ledger):
    for c in ledger.values():
        assert judge(c, NAN) == "not-run"
        assert judge(c, math.inf) == "not-run"
        assert judge(c, c.paper_value) in ("reproduced", "not-reproduced")


# -- compare / higher
@pytest.mark.parametrize(
    "value, expected",
    [
        (56.0, "exceeded"),  # > paper + tol
        (55.0, "reproduced"),  # == paper + tol: not beyond it
        (50.0, "reproduced"),
        (45.0, "reproduced"),  # == paper - tol
        (44.9, "partial"),  # short, but beats the null of 0
        (0.0, "not-reproduced"),  # equal to the null is no effect
        (-3.0, "not-reproduced"),
    ],
)
def test_compare_higher(ledger, value, expected):
    c = claim(
        ledger,
        rule="compare",
        direction="higher",
        paper_value=50,
        paper_low=NAN,
        paper_high=NAN,
        tolerance=5,
        null="0",
    )
    assert judge(c, value) == expected


def test_compare_higher_uses_paper_range(ledger):
    c = claim(
        ledger,
        rule="compare",
        direction="higher",
        paper_value=3.3,
        paper_low=3.21,
        paper_high=3.39,
        tolerance=0.2,
        null="1",
    )
    assert judge(c, 3.6) == "exceeded"
    assert judge(c, 3.59) == "reproduced"
    assert judge(c, 3.01) == "reproduced"
    assert judge(c, 2.0) == "partial"
    assert judge(c, 0.9) == "not-reproduced"


def test_compare_higher_without_null_is_never_partial(ledger):
    c = claim(
        ledger,
        rule="compare",
        direction="higher",
        paper_value=50,
        paper_low=NAN,
        paper_high=NAN,
        tolerance=5,
        null="",
    )
    assert judge(c, 30.0) == "not-reproduced"


# -- compare / lower, with the row's own baseline as the null
@pytest.mark.parametrize(
    "value, baseline, expected",
    [
        (15.0, 39.0, "exceeded"),  # < paper - tol
        (16.9, 39.0, "reproduced"),  # == paper - tol
        (20.9, 39.0, "reproduced"),  # == paper + tol
        (30.0, 39.0, "partial"),  # worse than paper, better than the measured baseline
        (39.0, 39.0, "not-reproduced"),  # no better than the baseline
        (45.0, 39.0, "not-reproduced"),
        (30.0, NAN, "not-reproduced"),  # baseline null but no baseline measured: not partial
    ],
)
def test_compare_lower_baseline_null(ledger, value, baseline, expected):
    c = claim(
        ledger,
        rule="compare",
        direction="lower",
        paper_value=18.9,
        paper_low=NAN,
        paper_high=NAN,
        tolerance=2,
        null="baseline",
    )
    assert judge(c, value, baseline) == expected


def test_compare_match(ledger):
    c = claim(ledger, rule="compare", direction="match", paper_value=0.35, tolerance=0.15)
    assert judge(c, 0.35) == "reproduced"
    assert judge(c, 0.2) == "reproduced"
    assert judge(c, 0.5) == "reproduced"
    assert judge(c, 0.51) == "not-reproduced"
    assert judge(c, 0.9) == "not-reproduced"  # "match" is never exceeded


def test_threshold_higher_is_strict(ledger):
    c = claim(ledger, rule="threshold", direction="higher", paper_value=0, tolerance=0)
    assert judge(c, 0.01) == "reproduced"
    assert judge(c, 0.0) == "not-reproduced"
    assert judge(c, -1.0) == "not-reproduced"


def test_threshold_lower_is_inclusive(ledger):
    c = claim(ledger, rule="threshold", direction="lower", paper_value=2, tolerance=0)
    assert judge(c, 2.0) == "reproduced"
    assert judge(c, 0.1) == "reproduced"
    assert judge(c, 2.01) == "not-reproduced"


def test_unknown_direction_names_the_claim(ledger):
    c = claim(ledger, rule="compare", direction="sideways")
    with pytest.raises(ValueError, match="C4.*sideways"):
        judge(c, 1.0)


def test_real_ledger_rules(ledger):
    assert judge(ledger["C3"], 0.97) == "reproduced"
    assert judge(ledger["C3"], 0.90) == "not-reproduced"
    assert judge(ledger["C5"], 25.0, 39.0) == "partial"
    assert judge(ledger["C11"], 3.3) == "reproduced"
    assert judge(ledger["C15"], 1.0) == "reproduced"
    assert judge(ledger["C16"], 1.0, 6.0) == "reproduced"
    assert judge(ledger["C16"], 3.0, 6.0) == "partial"
    assert judge(ledger["C9"], 3.0) == "reproduced"


# -- evaluate
def rows(*items):
    out = []
    for claim_id, metric, value, *rest in items:
        baseline = rest[0] if rest else NAN
        out.append(
            {
                "claim": claim_id,
                "metric": metric,
                "value": value,
                "ci_low": value - 1,
                "ci_high": value + 1,
                "baseline": baseline,
                "unit": "%",
                "conditions": "16 ranks",
                "evidence": "balance_steps",
            }
        )
    return experiments.metric_rows(out)


def test_evaluate_gives_all_18_with_verdict_or_reason():
    metrics = rows(("C5", "rank_cv_sim", 18.0, 39.0), ("C11", "fwd_speedup_wan", 3.3))
    verdicts = evaluate(metrics, {"training": "needs a CUDA GPU", "costmodel": "failed: boom"})
    assert [v.id for v in verdicts] == [f"C{i}" for i in range(1, 19)]
    for v in verdicts:
        assert v.verdict in VERDICTS
        assert (v.verdict == "not-run") == bool(v.reason), v.id
    by = {v.id: v for v in verdicts}
    assert by["C5"].verdict == "reproduced" and by["C5"].metric == "rank_cv_sim"
    assert by["C5"].baseline == 39.0 and by["C5"].conditions == "16 ranks"
    assert by["C11"].verdict == "reproduced"
    assert by["C10"].reason == "needs a CUDA GPU"
    assert by["C1"].reason == "failed: boom"
    assert "produced no metric" in by["C12"].reason  # kernels: no reason given


def test_evaluate_prefers_first_primary_and_lists_fallback_as_alternative():
    metrics = rows(
        ("C5", "rank_cv_sim", 30.0, 39.0),
        ("C5", "rank_cv_emulated", 18.5, 39.0),
        ("C5", "rank_maxmean_sim", 1.4),
    )
    v = {v.id: v for v in evaluate(metrics)}["C5"]
    assert v.metric == "rank_cv_emulated" and v.verdict == "reproduced"
    alts = {a["metric"]: a for a in v.alternatives}
    assert alts["rank_cv_sim"]["verdict"] == "partial"
    assert "rank_maxmean_sim" in alts
    assert "rank_cv_emulated" not in alts


def test_alternative_in_another_unit_is_shown_not_judged():
    metrics = rows(("C5", "rank_cv_sim", 18.0, 39.0))
    metrics.loc[len(metrics)] = ["C5", "rank_maxmean_sim", 1.2, NAN, NAN, NAN, "x", "", ""]
    v = {v.id: v for v in evaluate(metrics)}["C5"]
    (alt,) = [a for a in v.alternatives if a["metric"] == "rank_maxmean_sim"]
    assert alt["value"] == 1.2 and alt["verdict"] == ""


def test_evaluate_falls_back_to_second_primary_key():
    v = {v.id: v for v in evaluate(rows(("C1", "r_tokens_sweep", 0.4)))}["C1"]
    assert v.metric == "r_tokens_sweep" and v.verdict == "reproduced"


def test_evaluate_ignores_nan_and_inf_values():
    metrics = rows(("C4", "cv_reduction_sim", NAN), ("C6", "step_cv_sim", math.inf))
    by = {v.id: v for v in evaluate(metrics, {"balance": "failed: x"})}
    assert by["C4"].verdict == "not-run" and by["C4"].reason == "failed: x"
    assert by["C6"].verdict == "not-run" and by["C6"].reason


def test_evaluate_on_empty_frames():
    for metrics in (experiments.metric_rows([]), pd.DataFrame()):
        verdicts = evaluate(metrics)
        assert len(verdicts) == 18 and all(v.verdict == "not-run" for v in verdicts)


def test_evaluate_tolerates_missing_text_cells():
    metrics = pd.DataFrame([{"claim": "C9", "metric": "floor_gain_sim", "value": 2.0}])
    v = {v.id: v for v in evaluate(metrics)}["C9"]
    assert v.verdict == "reproduced" and v.unit == "%" and v.conditions == ""


def test_to_json_has_no_nan():
    metrics = rows(("C5", "rank_cv_sim", 18.0), ("C5", "rank_maxmean_sim", NAN))
    payload = [v.to_json() for v in evaluate(metrics)]
    text = json.dumps(payload, allow_nan=False)
    assert '"C18"' in text
    keys = {
        "id",
        "claim",
        "paper_value",
        "measured",
        "ci_low",
        "ci_high",
        "unit",
        "verdict",
        "definition",
        "conditions",
        "evidence",
        "reason",
    }
    assert all(keys <= set(d) for d in payload)
