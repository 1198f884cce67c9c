"""The claims ledger: the paper's 18 claims as data (claims.csv), and the rule that turns a run's
metric rows into verdicts. Nothing here is measured or typed in: a verdict exists only where an
experiment of this run (or a committed raw table) produced the metric.

Point rule (columns `rule`, `direction`, `tolerance`, `null` of claims.csv), `judge()`:
- compare/higher: exceeded if value > paper_high + tol; reproduced if value >= paper_low - tol;
  partial if it still beats the null (no-effect) value; otherwise not-reproduced.
- compare/lower: the mirror image.  compare/match: reproduced if |value - paper| <= tol.
- compare: a value that does not beat the null value is not-reproduced, whatever the paper says.
- threshold/higher: reproduced if value > paper_value, else not-reproduced (qualitative claims);
  threshold/lower: reproduced if value <= paper_value.
`null` is a number, or "baseline" for the metric row's own measured before-value (taken as a point).

Interval rule (`assess()`, what a verdict is): the point rule's verdict stands only when the whole
95% interval [ci_low, ci_high] (widened to hold the value) gets that same verdict, i.e. no boundary
of the rule (null, paper_low - tol, paper_high + tol, the threshold) lies inside it; otherwise the
verdict is `inconclusive` and the reason names the boundary the interval straddles. A metric with
no interval keeps its verdict only if the ledger lists it in `exact` (deterministic quantities:
kernel counts, saved bytes, the longest sequence that fits, each the same in every run of a
commit); any other metric without an interval is `inconclusive` ("no interval").

Primary metric: `primary` lists keys separated by |, tried in order; a key may name the
experiment that produces it as `experiment:key` (else it is the claim's `experiment`). When an
experiment failed (its error.txt, or its summarize raised) or is absent from the run directory
(stopped before it ran), no later experiment's key stands in: the claim is `not-run` with
"<experiment> failed (<error>)" (a failed training run never silently becomes a simulated
verdict). Past an experiment deliberately not run ("needs a CUDA GPU": the CPU profile), or one
that ran but gave none of its keys, the next experiment's key stands in and the verdict's reason
says so ("training not run (needs a CUDA GPU); judged on cv_reduction_sim").

C1 and C2 are one kind of claim (the strength of a correlation) with one rule type, mirrored:
C1 "weak" is compare/lower (R <= 0.35 + 0.15), C2 "strong" compare/higher (R >= 0.92 - 0.05),
both judged over the same population, the shape sweep across token counts (B 1-64, S 1560-75600).
Over equal-token steps B*S is held near M_tok by construction, so R(latency, B*S) there measures
the rounding of B = floor(M_tok / S), not the claim; those keys are shown as alternatives.
"""

from __future__ import annotations

import csv
import math
from dataclasses import asdict, dataclass, field
from importlib import resources

import pandas as pd

_COLUMNS = (
    "claim",
    "metric",
    "value",
    "ci_low",
    "ci_high",
    "baseline",
    "unit",
    "conditions",
    "evidence",
)
VERDICTS = ("exceeded", "reproduced", "partial", "not-reproduced", "inconclusive", "not-run")
# not-run reasons (suite.report.build.experiment_states) of an experiment that should have given
# its metrics and did not: a claim never falls back past such an experiment to another's key
_BROKEN = ("failed", "summarize failed", "not run in this run directory")


@dataclass(frozen=True)
class Claim:
    id: str
    statement: str
    paper_value: float
    paper_low: float
    paper_high: float
    paper_baseline: float
    paper_text: str
    unit: str
    rule: str
    direction: str
    tolerance: float
    null: str
    primary: tuple[str, ...]
    alternatives: tuple[str, ...]
    experiment: str
    hardware: str
    definition: str
    sources: tuple[str, ...] = ()  # the experiment producing each primary key
    exact: tuple[str, ...] = ()  # keys whose value is deterministic: judged without an interval


def _num(text: str) -> float:
    return float(text) if text.strip() else math.nan


def load_claims() -> list[Claim]:
    """The 18 claims, in ledger order."""
    text = resources.files("suite").joinpath("claims.csv").read_text(encoding="utf-8")
    rows = list(csv.DictReader(text.splitlines()))
    claims = []
    for r in rows:
        qualified = [
            k.split(":", 1) if ":" in k else [r["experiment"], k]
            for k in r["primary"].split("|")
            if k
        ]
        claims.append(
            Claim(
                id=r["id"],
                statement=r["statement"],
                paper_value=_num(r["paper_value"]),
                paper_low=_num(r["paper_low"]),
                paper_high=_num(r["paper_high"]),
                paper_baseline=_num(r["paper_baseline"]),
                paper_text=r["paper_text"],
                unit=r["unit"],
                rule=r["rule"],
                direction=r["direction"],
                tolerance=_num(r["tolerance"]) if r["tolerance"] else 0.0,
                null=r["null"],
                primary=tuple(k for _, k in qualified),
                alternatives=tuple(k for k in r["alternatives"].split(";") if k),
                experiment=r["experiment"],
                hardware=r["hardware"],
                definition=r["definition"],
                sources=tuple(e for e, _ in qualified),
                exact=tuple(k for k in r["exact"].split(";") if k),
            )
        )
    return claims


def judge(claim: Claim, value: float, baseline: float = math.nan) -> str:
    """The verdict for one measured value under the claim's rule."""
    if value is None or not math.isfinite(value):
        return "not-run"
    p = claim.paper_value
    tol = claim.tolerance + 1e-9 * max(1.0, abs(p))  # a value on the tolerance edge counts as in
    lo = claim.paper_low if math.isfinite(claim.paper_low) else p
    hi = claim.paper_high if math.isfinite(claim.paper_high) else p
    if claim.rule == "threshold":
        ok = value > p if claim.direction == "higher" else value <= p
        return "reproduced" if ok else "not-reproduced"
    if claim.direction == "match":
        return "reproduced" if abs(value - p) <= tol else "not-reproduced"
    if claim.direction not in ("higher", "lower"):
        raise ValueError(f"claims.csv: claim {claim.id} has unknown direction {claim.direction!r}")
    null = baseline if claim.null == "baseline" else _num(claim.null or "")
    # a claim of improvement is never met by a value that does not beat the no-effect value,
    # however close that value is to the paper's absolute number (e.g. CV 9.9% after vs 9.6% before)
    if math.isfinite(null) and (value <= null if claim.direction == "higher" else value >= null):
        return "not-reproduced"
    if claim.direction == "higher":
        if value > hi + tol:
            return "exceeded"
        if value >= lo - tol:
            return "reproduced"
        return "partial" if math.isfinite(null) and value > null else "not-reproduced"
    if claim.direction == "lower":
        if value < lo - tol:
            return "exceeded"
        if value <= hi + tol:
            return "reproduced"
        return "partial" if math.isfinite(null) and value < null else "not-reproduced"
    raise ValueError(f"claims.csv: claim {claim.id} has unknown direction {claim.direction!r}")


def boundaries(claim: Claim, baseline: float = math.nan) -> list[tuple[float, str]]:
    """The values at which judge()'s verdict changes, each with its name."""
    p, tol = claim.paper_value, claim.tolerance
    lo = claim.paper_low if math.isfinite(claim.paper_low) else p
    hi = claim.paper_high if math.isfinite(claim.paper_high) else p
    if claim.rule == "threshold":
        return [(p, f"the threshold {p:g}")]
    if claim.direction == "match":
        return [
            (p - tol, f"paper - tolerance = {p - tol:g}"),
            (p + tol, f"paper + tolerance = {p + tol:g}"),
        ]
    null = baseline if claim.null == "baseline" else _num(claim.null or "")
    out = [(null, f"the no-effect value {null:g}")] if math.isfinite(null) else []
    if claim.direction == "higher":
        return out + [
            (lo - tol, f"reproduced from {lo - tol:g}"),
            (hi + tol, f"exceeded above {hi + tol:g}"),
        ]
    return out + [
        (hi + tol, f"reproduced up to {hi + tol:g}"),
        (lo - tol, f"exceeded below {lo - tol:g}"),
    ]


def assess(
    claim: Claim,
    value: float,
    ci_low: float = math.nan,
    ci_high: float = math.nan,
    baseline: float = math.nan,
    exact: bool = False,
) -> tuple[str, str]:
    """(verdict, reason) under the interval rule: judge()'s verdict where the whole interval gets
    it (or the metric is exact and has none), else "inconclusive" with the boundary straddled."""
    point = judge(claim, value, baseline)
    if point == "not-run":
        return point, "no finite value"
    if not (math.isfinite(ci_low) and math.isfinite(ci_high)):
        if exact:
            return point, ""
        return "inconclusive", f"no interval (the value {value:.4g} alone reads {point})"
    lo, hi = min(ci_low, value), max(ci_high, value)
    ends = {judge(claim, lo, baseline), judge(claim, hi, baseline)}
    cuts = boundaries(claim, baseline)
    if ends == {point} and not any(lo < x < hi for x, _ in cuts):
        return point, ""
    names = [name for x, name in cuts if lo <= x <= hi]
    return "inconclusive", (
        f"95% interval [{lo:.4g}, {hi:.4g}] straddles {' and '.join(names)} "
        f"(the value {value:.4g} alone reads {point})"
    )


@dataclass
class Verdict:
    id: str
    claim: str
    paper_value: float
    paper_text: str
    measured: float
    ci_low: float
    ci_high: float
    baseline: float
    unit: str
    verdict: str
    metric: str
    definition: str
    conditions: str
    evidence: str
    reason: str
    alternatives: list[dict] = field(default_factory=list)
    point_verdict: str = ""  # what the value alone would read (judge()), for the report

    def to_json(self) -> dict:
        d = asdict(self)
        for k, v in d.items():  # JSON has no NaN: write null
            if isinstance(v, float) and not math.isfinite(v):
                d[k] = None
        for alt in d["alternatives"]:
            for k, v in alt.items():
                if isinstance(v, float) and not math.isfinite(v):
                    alt[k] = None
        return d


def _row(metrics: pd.DataFrame, claim_id: str, key: str) -> pd.Series | None:
    """The first row of (claim, metric) with a finite value; NaN/inf rows count as absent."""
    hit = metrics[(metrics["claim"] == claim_id) & (metrics["metric"] == key)]
    values = pd.to_numeric(hit["value"], errors="coerce").astype(float)
    hit = hit[values.map(math.isfinite)]
    return None if hit.empty else hit.iloc[0]


def _f(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def _s(x) -> str:
    """Text of a cell; empty for a missing (None/NaN) one."""
    return "" if x is None or (isinstance(x, float) and not math.isfinite(x)) else str(x)


def _assess_row(claim: Claim, key: str, r: pd.Series) -> tuple[str, str]:
    v = (_f(r["value"]), _f(r["ci_low"]), _f(r["ci_high"]), _f(r["baseline"]))
    return assess(claim, *v, exact=key in claim.exact)


def _alt_verdict(claim: Claim, key: str, r: pd.Series) -> str:
    """An alternative's verdict under the claim's rule; "" when its unit is not the claim's
    (a max/mean ratio cannot be judged against a percentage)."""
    unit = _s(r["unit"])
    if unit and unit != claim.unit:
        return ""
    return _assess_row(claim, key, r)[0]


def _pick(
    metrics: pd.DataFrame, c: Claim, not_run: dict[str, str]
) -> tuple[str | None, pd.Series | None, str]:
    """(key, row, note) of the claim's primary metric, note saying why an earlier experiment's key
    did not stand; or (None, None, reason) when there is none.

    Keys are tried in ledger order. Past an experiment that failed or is absent from the run
    directory (_BROKEN) no later key stands in; past one deliberately not run, or one that ran but
    gave none of its keys, the next experiment's key does, and the note says so."""
    notes = []
    for i, (exp, key) in enumerate(zip(c.sources, c.primary)):
        r = _row(metrics, c.id, key)
        if r is not None:
            return key, r, "; ".join([*notes, f"judged on {key}"] if notes else [])
        if i + 1 < len(c.primary) and c.sources[i + 1] == exp:
            continue  # the same experiment's next key (e.g. real ranks, then emulated)
        reason = not_run.get(exp)
        tried = ", ".join(k for e, k in zip(c.sources, c.primary) if e == exp)
        if reason is None:
            notes.append(f"{exp} ran but produced none of {tried}")
        elif reason.startswith(_BROKEN[:2]):
            return None, None, f"{exp} failed ({reason.removeprefix('failed: ')})"
        elif reason.startswith(_BROKEN[2]):
            return None, None, f"{exp} {reason}"
        else:
            notes.append(f"{exp} not run ({reason})")
    if len(notes) == 1 and notes[0].startswith(f"{c.sources[-1]} not run ("):
        return None, None, not_run[c.sources[-1]]  # one experiment, deliberately not run
    return None, None, "; ".join(notes)


def evaluate(metrics: pd.DataFrame, not_run: dict[str, str] | None = None) -> list[Verdict]:
    """Verdicts for all 18 claims from a run's metric rows.

    not_run maps an experiment name to the reason it did not run ("needs a CUDA GPU",
    "failed: <error>"); an experiment absent from it is taken to have run. A claim with no metric
    gets its experiment's reason; see _pick for when another experiment's key stands in.
    """
    not_run = not_run or {}
    metrics = metrics.reindex(columns=list(dict.fromkeys([*metrics.columns, *_COLUMNS])))
    out = []
    for c in load_claims():
        key, r, reason = _pick(metrics, c, not_run)
        alts = []
        for alt in dict.fromkeys(c.alternatives + c.primary):
            a = _row(metrics, c.id, alt)
            if a is None or alt == key:
                continue
            alts.append(
                {
                    "metric": alt,
                    "value": _f(a["value"]),
                    "ci_low": _f(a["ci_low"]),
                    "ci_high": _f(a["ci_high"]),
                    "baseline": _f(a["baseline"]),
                    "unit": _s(a["unit"]),
                    "conditions": _s(a["conditions"]),
                    "verdict": _alt_verdict(c, alt, a),
                }
            )
        nan = math.nan
        if r is None:
            out.append(
                Verdict(
                    c.id, c.statement, c.paper_value, c.paper_text, nan, nan, nan, nan, c.unit,
                    "not-run", "", c.definition, "", "", reason, alts,
                )
            )  # fmt: skip
            continue
        value, baseline = _f(r["value"]), _f(r["baseline"])
        verdict, why = _assess_row(c, key, r)
        why = "; ".join(x for x in (reason, why) if x)  # reason: another experiment's key stands in
        out.append(
            Verdict(
                c.id, c.statement, c.paper_value, c.paper_text, value, _f(r["ci_low"]),
                _f(r["ci_high"]), baseline, _s(r["unit"]) or c.unit, verdict, key, c.definition,
                _s(r["conditions"]), _s(r["evidence"]), why, alts, judge(c, value, baseline),
            )
        )  # fmt: skip
    return out
