"""The claims ledger: the paper's 18 claims as data (claims.csv), and the rule that turns a run's
metric rows into verdicts. Nothing here is measured or typed in: a verdict exists only where an
experiment of this run (or a committed raw table) produced the metric.

The verdict rule of one value (judge, boundaries, assess: point and interval rules, the relative
tolerance, "up to" claims) is suite.verdict_rule.

Readings (columns `reading`, `also`, `readings`, `compile`, `absent`):
- reading "reduction": the claim is a fall from a before-level to an after-level (C5, C6); every
  metric row in % with a measured baseline is judged as its relative reduction 100 * (1 - value /
  baseline) against the paper's own (39 -> 18.9: 51.5%), its interval from the value's ends (the
  baseline as a point); the absolute levels are written in the conditions beside it.
- also "key=X": a claim of two halves (C13: 61.9% and 4.8 GB; C15: kernel numerics and the
  policies' convergence): the second metric is judged against X under the same rule, and the
  claim's verdict is the weaker of the two (_WEAKEST_FIRST).
- readings: other readings of the claim as stated (C1's designed sweep, C4's CV reduction); where
  one's verdict differs from the primary's, the verdict's `reading_note` says so for the headline.
- compile: the key of the same claim against torch.compile instead of the paper's eager baseline
  (C11-C13), judged by the same rule and carried as `compile_verdict` beside the verdict.
- absent: the reason stated when the claim's experiment ran but no primary metric exists (C10:
  a run made before the experiment trained the tuned baseline, or whose budget skipped it).

Primary metric: `primary` lists keys separated by |, tried in order; a key may name the
experiment that produces it as `experiment:key` (else it is the claim's `experiment`). An
alternative may name its experiment the same way. The ledger is the one place that says which
experiments feed a claim (Claim.producers: its experiment, its primary keys' and its prefixed
alternatives'); `reproduce --only C4` runs them all.

When an experiment failed (its error.txt, or its summarize raised) or is absent from the run
directory (stopped before it ran), no later experiment's key stands in: the claim is `not-run` with
"<experiment> failed (<error>)" (a failed training run never silently becomes a simulated
verdict). Past an experiment deliberately not run ("needs a CUDA GPU": the CPU profile), or one
that ran but gave none of its keys, the next experiment's key stands in and the verdict's reason
says so ("training not run (needs a CUDA GPU); judged on cv_reduction_sim").

C1 and C2 are one kind of claim (the strength of a correlation) with one rule type, mirrored:
C1 "weak" is compare/lower, C2 "strong" compare/higher. C1 is judged over the population the
paper describes, the equal-token training batches (r_tokens_steps), with the designed shape sweep
across token counts as a reading beside it (the verdict differs between the two: the note says so).
"""

from __future__ import annotations

import csv
import math
from dataclasses import asdict, dataclass, field, replace
from importlib import resources

import pandas as pd

from suite import evidence
from suite.metrics import METRIC_COLUMNS
from suite.verdict_rule import _num, assess, boundaries, judge  # noqa: F401 (boundaries: the API)

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
    reading: str = ""  # "reduction": rows judged as 100 * (1 - value / baseline)
    also: tuple[str, float] | None = None  # the second half: (key, paper value)
    readings: tuple[str, ...] = ()  # alternatives that are other readings of the claim as stated
    compile: str = ""  # the key against torch.compile instead of the eager baseline
    absent: str = ""  # why no primary metric exists although the experiment ran
    producers: tuple[str, ...] = ()  # every experiment giving one of its metrics, ledger order


def _also(text: str, claim_id: str) -> tuple[str, float] | None:
    if not text:
        return None
    key, sep, value = text.partition("=")
    if not sep:
        raise ValueError(f"claims.csv: claim {claim_id} has also {text!r}; accepted: key=value")
    return key, float(value)


def _qualified(keys: list[str], experiment: str) -> list[tuple[str, str]]:
    """(experiment, key) of each `experiment:key` or bare key (the claim's experiment's)."""
    return [tuple(k.split(":", 1)) if ":" in k else (experiment, k) for k in keys if k]


def load_claims() -> list[Claim]:
    """The 18 claims, in ledger order."""
    text = resources.files("suite").joinpath("claims.csv").read_text(encoding="utf-8")
    rows = list(csv.DictReader(text.splitlines()))
    claims = []
    for r in rows:
        qualified = _qualified(r["primary"].split("|"), r["experiment"])
        alternatives = _qualified(r["alternatives"].split(";"), r["experiment"])
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
                alternatives=tuple(k for _, k in alternatives),
                experiment=r["experiment"],
                hardware=r["hardware"],
                definition=r["definition"],
                sources=tuple(e for e, _ in qualified),
                exact=tuple(k for k in r["exact"].split(";") if k),
                reading=r["reading"],
                also=_also(r["also"], r["id"]),
                readings=tuple(k for k in r["readings"].split(";") if k),
                compile=r["compile"],
                absent=r["absent"],
                producers=tuple(
                    dict.fromkeys([r["experiment"], *(e for e, _ in qualified + alternatives)])
                ),
            )
        )
    return claims


def claims_of(experiment: str) -> tuple[str, ...]:
    """The ids of the claims `experiment` gives a metric to (primary or alternative), per the
    ledger."""
    return tuple(c.id for c in load_claims() if experiment in c.producers)


_READINGS = ("", "reduction")


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
    reading_note: str = ""  # where another reading of the claim (Claim.readings) reads otherwise
    compile_metric: str = ""  # the same claim against torch.compile (Claim.compile)
    compile_value: float = math.nan
    compile_verdict: str = ""
    evidence_kind: str = ""  # what stands behind the value (suite.evidence); "" when not run

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


def _row(metrics: pd.DataFrame, claim: Claim, key: str) -> pd.Series | None:
    """The first row of (claim, metric) with a finite value, read as the claim reads it (a
    reduction claim's rows as reductions); NaN/inf rows count as absent."""
    hit = metrics[(metrics["claim"] == claim.id) & (metrics["metric"] == key)]
    values = pd.to_numeric(hit["value"], errors="coerce").astype(float)
    hit = hit[values.map(math.isfinite)]
    return None if hit.empty else _read(claim, hit.iloc[0])


def _read(claim: Claim, r: pd.Series) -> pd.Series:
    """A reduction claim's row as 100 * (1 - value / baseline), the levels in its conditions; a
    row without a measured baseline, or not a level in %, comes back with unit "level" (shown,
    not judged: see _alt_verdict)."""
    if claim.reading not in _READINGS:
        raise ValueError(
            f"claims.csv: claim {claim.id} has reading {claim.reading!r}; accepted: {_READINGS}"
        )
    if claim.reading != "reduction":
        return r
    r = r.copy()
    v, b = _f(r["value"]), _f(r["baseline"])
    if _s(r["unit"]) != "%" or not (math.isfinite(b) and b > 0):
        r["unit"] = f"level {_s(r['unit'])}".strip()
        return r
    ends = [100 * (1 - _f(r[k]) / b) for k in ("ci_high", "ci_low")]
    mcse = [100 * _f(r.get(k)) / b for k in ("ci_high_mcse", "ci_low_mcse")]  # the ends swap
    levels = (
        f"relative reduction 1 - {v:.4g}% / {b:.4g}% (the levels: after {v:.4g}%, before {b:.4g}%)"
    )
    r["value"], r["ci_low"], r["ci_high"], r["baseline"] = 100 * (1 - v / b), *ends, math.nan
    r["ci_low_mcse"], r["ci_high_mcse"] = mcse
    r["conditions"] = "; ".join(x for x in (levels, _s(r["conditions"])) if x)
    return r


def _f(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def _s(x) -> str:
    """Text of a cell; empty for a missing (None/NaN) one."""
    return "" if x is None or (isinstance(x, float) and not math.isfinite(x)) else str(x)


# the weaker verdict first: a claim of two halves reads the weaker half's verdict
_WEAKEST_FIRST = ("not-reproduced", "not-run", "inconclusive", "partial", "reproduced", "exceeded")


def _weaker(a: str, b: str) -> str:
    return min(a, b, key=_WEAKEST_FIRST.index)


def _assess_row(claim: Claim, key: str, r: pd.Series) -> tuple[str, str]:
    if claim.reading and _s(r["unit"]).startswith("level"):
        return "not-run", f"{key} has no measured baseline to read a {claim.reading} from"
    v = (_f(r["value"]), _f(r["ci_low"]), _f(r["ci_high"]), _f(r["baseline"]))
    mcse = (_f(r.get("ci_low_mcse")), _f(r.get("ci_high_mcse")))
    return assess(claim, *v, exact=key in claim.exact, mcse=mcse)


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
        r = _row(metrics, c, key)
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
    if c.absent and notes[-1].startswith(f"{c.sources[-1]} ran but"):
        notes[-1] = f"{c.absent} ({notes[-1]})"
    return None, None, "; ".join(notes)


def _second_half(
    metrics: pd.DataFrame, c: Claim, verdict: str, point: str, key: str
) -> tuple[str, str, str]:
    """(verdict, point verdict, reason) of a claim of two halves (Claim.also): the weaker half."""
    key2, paper2 = c.also
    r = _row(metrics, c, key2)
    if r is None:
        return verdict, point, f"the second half, {key2} (paper {paper2:g}), was not measured"
    half = replace(c, paper_value=paper2, paper_low=math.nan, paper_high=math.nan)
    v2, why2 = _assess_row(half, key2, r)
    p2 = judge(half, _f(r["value"]), _f(r["baseline"]))
    reason = (
        f"both halves judged: {key} reads {verdict}; {key2} = {_f(r['value']):.4g} "
        f"{_s(r['unit'])} against the paper's {paper2:g} reads {v2}"
        + (f" ({why2})" if why2 else "")
    )
    return _weaker(verdict, v2), _weaker(point, p2), reason


def _reading_note(c: Claim, verdict: str, alts: list[dict]) -> str:
    """Where another reading of the claim as stated reads otherwise, the words that say so."""
    differ = [
        f"{a['metric']} reads {a['verdict']}"
        for a in alts
        if a["metric"] in c.readings and a["verdict"] and a["verdict"] != verdict
    ]
    return f"the verdict depends on the reading: {'; '.join(differ)}" if differ else ""


def evaluate(metrics: pd.DataFrame, not_run: dict[str, str] | None = None) -> list[Verdict]:
    """Verdicts for all 18 claims from a run's metric rows.

    not_run maps an experiment name to the reason it did not run ("needs a CUDA GPU",
    "failed: <error>"); an experiment absent from it is taken to have run. A claim with no metric
    gets its experiment's reason; see _pick for when another experiment's key stands in.
    """
    not_run = not_run or {}
    metrics = metrics.reindex(columns=list(dict.fromkeys([*metrics.columns, *METRIC_COLUMNS])))
    out = []
    for c in load_claims():
        key, r, reason = _pick(metrics, c, not_run)
        alts = []
        for alt in dict.fromkeys(c.alternatives + c.primary):
            a = _row(metrics, c, alt)
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
                    "evidence_kind": _s(a.get("evidence_kind")),
                }
            )
        nan = math.nan
        if r is None:
            missing = Verdict(
                c.id, c.statement, c.paper_value, c.paper_text, nan, nan, nan, nan, c.unit,
                "not-run", "", c.definition, "", "", reason, alts,
            )  # fmt: skip
            out.append(_with_compile(metrics, c, missing))
            continue
        value, baseline = _f(r["value"]), _f(r["baseline"])
        verdict, why = _assess_row(c, key, r)
        point = judge(c, value, baseline)
        if c.also:
            verdict, point, halves = _second_half(metrics, c, verdict, point, key)
            why = "; ".join(x for x in (why, halves) if x)
        why = "; ".join(x for x in (reason, why) if x)  # reason: another experiment's key stands in
        v = Verdict(
            c.id, c.statement, c.paper_value, c.paper_text, value, _f(r["ci_low"]),
            _f(r["ci_high"]), baseline, _s(r["unit"]) or c.unit, verdict, key, c.definition,
            _s(r["conditions"]), _s(r["evidence"]), why, alts, point,
            _reading_note(c, verdict, alts),
        )  # fmt: skip
        halves = [_s(r.get("evidence_kind"))]
        if c.also and (h := _row(metrics, c, c.also[0])) is not None:
            halves.append(_s(h.get("evidence_kind")))
        v.evidence_kind = evidence.weakest(halves)
        out.append(_with_compile(metrics, c, v))
    return out


def _with_compile(metrics: pd.DataFrame, c: Claim, v: Verdict) -> Verdict:
    """The verdict with the claim's torch.compile reading beside it (Claim.compile)."""
    if not c.compile:
        return v
    v.compile_metric = c.compile
    r = _row(metrics, c, c.compile)
    if r is None:
        v.compile_verdict = "not-run"
        return v
    v.compile_value = _f(r["value"])
    v.compile_verdict = _assess_row(c, c.compile, r)[0]
    return v
