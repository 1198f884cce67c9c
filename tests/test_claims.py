"""The claims ledger and its verdict rules: every direction and rule, partial and baseline nulls,
the interval rule (inconclusive), every ledger id, evaluate() on fake metric rows, not-run reasons and
when another experiment's key may stand in."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pandas as pd
import pytest

from suite import experiments
from suite.claims import VERDICTS, assess, evaluate, judge, load_claims

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
        assert c.rule in ("compare", "upto", "threshold"), c.id
        assert c.direction in ("higher", "lower", "match"), c.id
        assert c.primary, f"{c.id} has no primary metric"
        assert math.isfinite(c.paper_value), c.id
        assert c.experiment in experiments.REGISTRY, c.id
        assert c.hardware in ("cpu", "cuda"), c.id
        assert c.definition and c.statement and c.unit, c.id
        assert c.null in ("", "baseline") or math.isfinite(float(c.null)), c.id
        assert c.tolerance >= 0, c.id


def test_tolerance_is_one_relative_fraction_for_every_compared_claim(ledger):
    """Old: absolute tolerances in each claim's unit (5 points on 25.6%, 2 on a CV of 18.9%,
    0.15 on R = 0.35, 0.2 on 3.3x): 20%, 11%, 43%, 6% of the paper's values."""
    compared = {c.tolerance for c in ledger.values() if c.rule != "threshold"}
    assert compared == {0.1}
    assert judge(ledger["C7"], 28.2) == "exceeded"  # 25.6 * 1.1 = 28.16; old: reproduced to 30.6
    assert judge(ledger["C1"], 0.40) == "not-reproduced"  # 0.35 * 1.1; old: reproduced to 0.50


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
        tolerance=0.1,
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
        tolerance=0.1,
        null="1",
    )
    assert judge(c, 3.73) == "exceeded"  # above 3.39 * 1.1
    assert judge(c, 3.72) == "reproduced"
    assert judge(c, 2.89) == "reproduced"  # from 3.21 * 0.9
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
        tolerance=0.1,
        null="",
    )
    assert judge(c, 30.0) == "not-reproduced"


# -- compare / lower, with the row's own baseline as the null
@pytest.mark.parametrize(
    "value, baseline, expected",
    [
        (15.0, 39.0, "exceeded"),  # < paper - tol
        (17.01, 39.0, "reproduced"),  # == paper * (1 - tol)
        (20.79, 39.0, "reproduced"),  # == paper * (1 + tol)
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
        tolerance=0.1,
        null="baseline",
    )
    assert judge(c, value, baseline) == expected


def test_compare_match(ledger):
    c = claim(ledger, rule="compare", direction="match", paper_value=0.35, tolerance=3 / 7)
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
    assert judge(ledger["C5"], 25.0) == "partial"  # a 25% reduction, short of 51.5%
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
        assert v.verdict in ("exceeded", "reproduced") or v.reason, v.id
    by = {v.id: v for v in verdicts}
    assert by["C5"].verdict == "reproduced" and by["C5"].metric == "rank_cv_sim"
    assert by["C5"].reason == ""  # the simulation is C5's primary: no stand-in
    assert by["C5"].measured == pytest.approx(100 * (1 - 18 / 39))  # the relative reduction
    assert by["C5"].conditions.startswith("relative reduction 1 - 18% / 39%")
    assert by["C5"].conditions.endswith("16 ranks")
    assert by["C11"].verdict == "inconclusive"  # [2.3, 4.3] straddles 3.01 and 3.59
    assert by["C10"].reason == "needs a CUDA GPU"
    assert by["C1"].reason == "costmodel failed (boom)"
    assert "kernels ran but produced none of" in by["C12"].reason  # no reason given: it ran


SIM = {"C4": "imbalance_rate_reduction_sim", "C5": "rank_cv_sim", "C6": "step_cv_sim"}
SIM |= {"C7": "throughput_gain_8_sim", "C8": "throughput_gain_16_sim", "C9": "floor_gain_sim"}
EMU = {c: k.replace("_sim", "_emulated") for c, k in SIM.items()}
EMU["C4"] = "cv_reduction_emulated"  # shown beside C4, another reading: never its primary


@pytest.mark.parametrize("claim_id", ["C4", "C5", "C6", "C7", "C8", "C9"])
@pytest.mark.parametrize(
    "reason, says",
    [
        ("failed: ValueError: boom", "balance failed (ValueError: boom"),
        ("summarize failed: KeyError: 'step'", "balance failed (summarize failed: KeyError"),
        ("not run in this run directory", "balance not run in this run directory"),
    ],
)
def test_simulation_failure_never_falls_back_to_emulated(claim_id, reason, says):
    """C4-C9 are judged on the trace-driven simulation (issue 31); when it failed the emulated
    key (the next `primary` key, from training) is shown, never judged."""
    metrics = rows((claim_id, EMU[claim_id], 20.0, 39.0))
    v = {v.id: v for v in evaluate(metrics, {"balance": reason})}[claim_id]
    assert v.verdict == "not-run" and v.reason.startswith(says), v.reason
    assert EMU[claim_id] in {a["metric"] for a in v.alternatives}


@pytest.mark.parametrize("claim_id", ["C4", "C5", "C6", "C7", "C8", "C9"])
def test_simulation_is_primary_and_emulation_an_alternative(claim_id):
    metrics = rows((claim_id, SIM[claim_id], 20.0, 39.0), (claim_id, EMU[claim_id], 21.0, 39.0))
    v = {v.id: v for v in evaluate(metrics, {"training": "failed: boom"})}[claim_id]
    assert v.metric == SIM[claim_id] and "training" not in v.reason
    assert EMU[claim_id] in {a["metric"] for a in v.alternatives}


def test_a_balance_run_without_its_keys_is_named_when_the_emulation_stands_in():
    v = {v.id: v for v in evaluate(rows(("C5", "rank_cv_emulated", 19.0, 39.0)))}["C5"]
    assert v.metric == "rank_cv_emulated" and v.verdict == "reproduced"
    assert v.reason == "balance ran but produced none of rank_cv_sim; judged on rank_cv_emulated"


def test_c4_has_no_emulated_stand_in():
    """Old: C4 fell back to the emulated CV reduction, another reading than its imbalance rate."""
    v = {v.id: v for v in evaluate(rows(("C4", "cv_reduction_emulated", 50.0)))}["C4"]
    assert v.verdict == "not-run" and "imbalance_rate_reduction_sim" in v.reason


def test_same_experiment_keys_fall_back_in_order():
    """C7: simulated, then real ranks, then the one-GPU emulation (both of `training`)."""
    metrics = rows(("C7", "throughput_gain_8_emulated", 26.0))
    v = {v.id: v for v in evaluate(metrics, {"balance": "needs nothing"})}["C7"]
    assert v.metric == "throughput_gain_8_emulated" and v.verdict == "reproduced"
    assert v.reason == "balance not run (needs nothing); judged on throughput_gain_8_emulated"


def test_evaluate_prefers_first_primary_and_lists_fallback_as_alternative():
    metrics = rows(
        ("C5", "rank_cv_emulated", 30.0, 39.0),
        ("C5", "rank_cv_sim", 18.5, 39.0),
        ("C5", "rank_maxmean_sim", 1.4),
    )
    v = {v.id: v for v in evaluate(metrics)}["C5"]
    assert v.metric == "rank_cv_sim" and v.verdict == "reproduced"  # [17.5, 19.5]
    alts = {a["metric"]: a for a in v.alternatives}
    assert alts["rank_cv_emulated"]["verdict"] == "partial"
    assert "rank_maxmean_sim" in alts
    assert "rank_cv_sim" not in alts


def test_alternative_in_another_unit_is_shown_not_judged():
    metrics = rows(("C5", "rank_cv_sim", 18.0, 39.0))
    row = {"claim": "C5", "metric": "rank_maxmean_sim", "value": 1.2, "unit": "x"}
    metrics.loc[len(metrics)] = experiments.metric_rows([row]).iloc[0]
    v = {v.id: v for v in evaluate(metrics, {"training": "needs a CUDA GPU"})}["C5"]
    (alt,) = [a for a in v.alternatives if a["metric"] == "rank_maxmean_sim"]
    assert alt["value"] == 1.2 and alt["verdict"] == ""


def test_c1_and_c2_are_one_rule_mirrored_c1_over_the_equal_token_batches(ledger):
    """Old: C1 judged over the designed sweep (r_tokens_sweep), the equal-token training batches
    the paper describes only an alternative; now the other way round, the sweep a reading."""
    c1, c2 = ledger["C1"], ledger["C2"]
    assert (c1.rule, c1.direction, c2.rule, c2.direction) == (
        "compare",
        "lower",
        "compare",
        "higher",
    )
    assert c1.primary == ("r_tokens_steps", "r_tokens_sweep_eqtok")
    assert c1.sources == ("training", "costmodel") and c1.readings == ("r_tokens_sweep",)
    assert c2.primary == ("r_bs2_sweep",) and "r_bs2_steps" in c2.alternatives
    assert judge(c1, 0.10) == "exceeded" and judge(c1, 0.38) == "reproduced"
    assert judge(c1, 0.8) == "not-reproduced" and judge(c2, 0.9) == "reproduced"
    metrics = rows(("C1", "r_tokens_steps", 0.0), ("C1", "r_tokens_sweep", 0.8))
    metrics["ci_low"], metrics["ci_high"] = metrics.value - 0.1, metrics.value + 0.1
    metrics["unit"] = "R"
    v = {v.id: v for v in evaluate(metrics)}["C1"]
    assert (v.metric, v.verdict) == ("r_tokens_steps", "exceeded")
    assert (
        v.reading_note == "the verdict depends on the reading: r_tokens_sweep reads not-reproduced"
    )


def test_evaluate_ignores_nan_and_inf_values():
    metrics = rows(("C4", "cv_reduction_sim", NAN), ("C6", "step_cv_sim", math.inf))
    by = {
        v.id: v for v in evaluate(metrics, {"training": "needs a CUDA GPU", "balance": "failed: x"})
    }
    assert by["C4"].verdict == "not-run" and by["C4"].reason == "balance failed (x)"
    assert by["C6"].verdict == "not-run" and by["C6"].reason


def test_evaluate_on_empty_frames():
    for metrics in (experiments.metric_rows([]), pd.DataFrame()):
        verdicts = evaluate(metrics)
        assert len(verdicts) == len(load_claims()) and all(v.verdict == "not-run" for v in verdicts)


def test_evaluate_tolerates_missing_text_cells():
    metrics = pd.DataFrame([{"claim": "C9", "metric": "floor_gain_sim", "value": 2.0}])
    v = {v.id: v for v in evaluate(metrics, {"training": "needs a CUDA GPU"})}["C9"]
    assert v.verdict == "inconclusive" and v.unit == "%" and v.conditions == ""
    assert "no interval" in v.reason and v.point_verdict == "reproduced"


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


# -- the interval rule
def test_interval_must_lie_on_one_side_of_every_boundary(ledger):
    c = claim(ledger, rule="compare", paper_value=50, paper_low=NAN, paper_high=NAN,
              tolerance=0.1, null="0")  # fmt: skip
    assert assess(c, 50.0, 46.0, 54.0) == ("reproduced", "")
    assert assess(c, 60.0, 56.0, 70.0) == ("exceeded", "")
    assert assess(c, 20.0, 10.0, 30.0) == ("partial", "")
    assert assess(c, -5.0, -9.0, -1.0) == ("not-reproduced", "")
    verdict, why = assess(c, 47.0, 40.0, 54.0)  # the point alone: reproduced
    assert verdict == "inconclusive" and "[40, 54]" in why and "reproduced from 45" in why
    verdict, why = assess(c, 3.0, -1.0, 8.0)
    assert verdict == "inconclusive" and "no-effect value 0" in why


def test_interval_on_a_boundary_edge_counts_as_in(ledger):
    c = claim(ledger, rule="compare", paper_value=50, paper_low=NAN, paper_high=NAN,
              tolerance=0.1, null="0")  # fmt: skip
    assert assess(c, 50.0, 45.0, 55.0)[0] == "reproduced"  # both ends inclusive
    assert assess(c, 1.0, 0.0, 2.0)[0] == "inconclusive"  # 0 itself is no effect


def test_match_interval_straddling_both_edges_is_inconclusive(ledger):
    c = claim(ledger, rule="compare", direction="match", paper_value=0.35, tolerance=3 / 7)
    assert assess(c, 0.35, 0.25, 0.45)[0] == "reproduced"
    assert assess(c, 0.8, 0.6, 0.9)[0] == "not-reproduced"
    verdict, why = assess(c, 0.35, 0.1, 0.6)  # both ends read not-reproduced, the middle not
    assert verdict == "inconclusive" and "0.2" in why and "0.5" in why


def test_an_end_within_monte_carlo_reach_of_a_boundary_is_inconclusive(ledger):
    """Old behaviour: a bootstrap interval's ends were read as exact, so [56.8, 80] read exceeded
    above 56.69 on one run and [56.5, 80] inconclusive on a re-run of the same data, each end
    carrying a Monte Carlo SE of ~1.2 points from its 200 replicates. Now an end within MC_Z SEs
    of a boundary leaves the verdict inconclusive; far from every boundary it stays decisive."""
    from suite.verdict_rule import MC_Z

    c = claim(ledger, rule="compare", paper_value=51.54, paper_low=NAN, paper_high=NAN,
              tolerance=0.1, null="0")  # fmt: skip
    assert assess(c, 68.0, 56.8, 80.0) == ("exceeded", "")  # no SE: the old reading
    verdict, why = assess(c, 68.0, 56.8, 80.0, mcse=(1.2, 1.5))
    assert verdict == "inconclusive"
    assert "reads exceeded" in why and "low end 56.8" in why and "exceeded above 56.69" in why
    assert f"within {MC_Z} Monte Carlo SE (1.2)" in why and "high end" not in why
    assert assess(c, 68.0, 60.0, 80.0, mcse=(1.2, 1.5)) == ("exceeded", "")  # 3.3 away
    assert assess(c, 68.0, 56.8, 80.0, mcse=(0.05, 1.5)) == ("exceeded", "")  # SE small
    assert assess(c, 68.0, 56.8, 80.0, mcse=(NAN, NAN)) == ("exceeded", "")  # none given
    assert assess(c, 60.0, 50.0, 70.0, mcse=(0.1, 0.1))[0] == "inconclusive"  # as before


def test_a_reduction_claim_reads_its_levels_monte_carlo_error(ledger):
    """C5 reads a level row as 1 - level / baseline: the level's high end (and its SE) becomes
    the reduction's low end, scaled by 100 / baseline."""
    row = {"claim": "C5", "metric": "rank_cv_sim", "value": 10.0, "ci_low": 8.0, "ci_high": 21.0,
           "ci_low_mcse": 0.0, "ci_high_mcse": 0.6, "baseline": 50.0, "unit": "%"}  # fmt: skip
    plain = {k: v for k, v in row.items() if "mcse" not in k}
    a, b = ({v.id: v for v in evaluate(experiments.metric_rows([r]))}["C5"] for r in (plain, row))
    assert a.metric == "rank_cv_sim" and a.ci_low == b.ci_low == pytest.approx(58.0)
    assert a.verdict == "exceeded" and b.verdict == "inconclusive"  # 58 - 56.69 < 1.96 * 1.2
    assert "within 1.96 Monte Carlo SE (1.2)" in b.reason


def test_baseline_null_is_a_boundary(ledger):
    c = claim(ledger, rule="compare", direction="lower", paper_value=18.9, paper_low=NAN,
              paper_high=NAN, tolerance=0.1, null="baseline")  # fmt: skip
    assert assess(c, 30.0, 28.0, 32.0, baseline=39.0)[0] == "partial"
    assert assess(c, 37.0, 35.0, 41.0, baseline=39.0)[0] == "inconclusive"


def test_no_interval_stands_only_for_exact_metrics(ledger):
    """Old behaviour: every point value gave a verdict, with or without an interval."""
    assert assess(ledger["C16"], 1.0, baseline=7.0, exact=True) == ("reproduced", "")
    verdict, why = assess(ledger["C11"], 3.3)
    assert verdict == "inconclusive" and why.startswith("no interval")
    by = {v.id: v for v in evaluate(experiments.metric_rows([
        {"claim": "C16", "metric": "kernels_fused_fwd", "value": 1.0, "baseline": 7.0},
        {"claim": "C11", "metric": "fwd_speedup_wan", "value": 3.3},
    ]))}  # fmt: skip
    assert by["C16"].verdict == "reproduced" and by["C11"].verdict == "inconclusive"
    assert by["C11"].point_verdict == "reproduced"


def test_exact_keys_are_counts_or_bytes(ledger):
    exact = {c.id: c.exact for c in ledger.values() if c.exact}
    assert set(exact) == {"C13", "C14", "C16"}
    assert all(
        set(keys) <= set(ledger[i].primary + ledger[i].alternatives) for i, keys in exact.items()
    )
