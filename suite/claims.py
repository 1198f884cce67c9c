"""The claims ledger: the paper's 18 claims as data (claims.csv), and the rule that turns a run's
metric rows into verdicts. Nothing here is measured or typed in: a verdict exists only where an
experiment of this run (or a committed raw table) produced the metric.

Verdict rules (columns `rule`, `direction`, `tolerance`, `null` of claims.csv):
- compare/higher: exceeded if value > paper_high + tol; reproduced if value >= paper_low - tol;
  partial if it still beats the null (no-effect) value; otherwise not-reproduced.
- compare/lower: the mirror image.  compare/match: reproduced if |value - paper| <= tol.
- compare: a value that does not beat the null value is not-reproduced, whatever the paper says.
- threshold/higher: reproduced if value > paper_value, else not-reproduced (qualitative claims);
  threshold/lower: reproduced if value <= paper_value.
`null` is a number, or "baseline" for the metric row's own measured before-value.
The primary metric is the first key of `primary` (separated by |) present in the run.
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
VERDICTS = ("exceeded", "reproduced", "partial", "not-reproduced", "not-run")


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


def _num(text: str) -> float:
    return float(text) if text.strip() else math.nan


def load_claims() -> list[Claim]:
    """The 18 claims, in ledger order."""
    text = resources.files("suite").joinpath("claims.csv").read_text(encoding="utf-8")
    rows = list(csv.DictReader(text.splitlines()))
    claims = []
    for r in rows:
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
                primary=tuple(k for k in r["primary"].split("|") if k),
                alternatives=tuple(k for k in r["alternatives"].split(";") if k),
                experiment=r["experiment"],
                hardware=r["hardware"],
                definition=r["definition"],
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


def _alt_verdict(claim: Claim, r: pd.Series) -> str:
    """An alternative's verdict under the claim's rule; "" when its unit is not the claim's
    (a max/mean ratio cannot be judged against a percentage)."""
    unit = _s(r["unit"])
    if unit and unit != claim.unit:
        return ""
    return judge(claim, _f(r["value"]), _f(r["baseline"]))


def evaluate(metrics: pd.DataFrame, not_run: dict[str, str] | None = None) -> list[Verdict]:
    """Verdicts for all 18 claims from a run's metric rows.

    not_run maps an experiment name to the reason it did not run ("needs a CUDA GPU",
    "failed: <error>"); a claim with no metric gets its experiment's reason.
    """
    not_run = not_run or {}
    metrics = metrics.reindex(columns=list(dict.fromkeys([*metrics.columns, *_COLUMNS])))
    out = []
    for c in load_claims():
        keys_seen = [k for k in c.primary if _row(metrics, c.id, k) is not None]
        alts = []
        for key in dict.fromkeys(c.alternatives + c.primary[1:]):
            r = _row(metrics, c.id, key)
            if r is None or (keys_seen and key == keys_seen[0]):
                continue
            alts.append(
                {
                    "metric": key,
                    "value": _f(r["value"]),
                    "ci_low": _f(r["ci_low"]),
                    "ci_high": _f(r["ci_high"]),
                    "baseline": _f(r["baseline"]),
                    "unit": _s(r["unit"]),
                    "conditions": _s(r["conditions"]),
                    "verdict": _alt_verdict(c, r),
                }
            )
        if not keys_seen:
            reason = not_run.get(c.experiment) or f"experiment '{c.experiment}' produced no metric"
            out.append(
                Verdict(
                    c.id,
                    c.statement,
                    c.paper_value,
                    c.paper_text,
                    math.nan,
                    math.nan,
                    math.nan,
                    math.nan,
                    c.unit,
                    "not-run",
                    "",
                    c.definition,
                    "",
                    "",
                    reason,
                    alts,
                )
            )
            continue
        key = keys_seen[0]
        r = _row(metrics, c.id, key)
        value, baseline = _f(r["value"]), _f(r["baseline"])
        out.append(
            Verdict(
                c.id,
                c.statement,
                c.paper_value,
                c.paper_text,
                value,
                _f(r["ci_low"]),
                _f(r["ci_high"]),
                baseline,
                _s(r["unit"]) or c.unit,
                judge(c, value, baseline),
                key,
                c.definition,
                _s(r["conditions"]),
                _s(r["evidence"]),
                "",
                alts,
            )
        )
    return out
