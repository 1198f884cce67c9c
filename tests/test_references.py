"""The committed references are what they say. Every claim run under reports/reference/ (a folder
with results/, metrics.csv and claims.json; found, not listed, so a newly committed run is checked
too): today's summarize() on its raw tables gives its metrics.csv, and today's rules on those rows
give its claims.json. The quick and full references of each GPU are also one complete run of one
commit."""

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from suite.claims import evaluate, load_claims
from suite.experiments import REGISTRY
from suite.report.build import (
    compute_metrics,
    experiment_states,
    open_run,
    ranks_notes,
    run_env_table,
)

REFERENCE = Path(__file__).resolve().parents[1] / "reports" / "reference"


def claim_runs() -> list[str]:
    """Folders under reports/reference/ holding results/, metrics.csv and claims.json."""
    return sorted(
        p.parent.relative_to(REFERENCE).as_posix()
        for p in REFERENCE.rglob("claims.json")
        if (p.parent / "results").is_dir() and (p.parent / "metrics.csv").is_file()
    )


CLAIM_RUNS = claim_runs()
REBUILT = CLAIM_RUNS  # every committed claim run rebuilds from its results/
NUMBERS = ["value", "ci_low", "ci_high", "baseline", "ci_low_mcse", "ci_high_mcse"]
TEXT = ["unit", "conditions", "evidence"]
# what a verdict is, as claims.json records it (prose from the ledger is not compared)
JUDGED = ["metric", "verdict", "point_verdict", "measured", "ci_low", "ci_high", "baseline"]
JUDGED += ["unit", "compile_metric", "compile_value", "compile_verdict", "ranks"]
ALTERNATIVE = ["metric", "verdict", "value", "ci_low", "ci_high", "baseline"]


def _same(got, want) -> bool:
    """Equal, numbers to 1e-9 relative; NaN and JSON null are one "no value"."""
    nums = [float("nan") if x is None else x for x in (got, want)]
    if all(isinstance(x, (int, float)) for x in nums):
        g, w = map(float, nums)
        return (math.isnan(g) and math.isnan(w)) or g == pytest.approx(w, rel=1e-9, abs=0)
    return got == want


def _rebuild(run_dir: Path) -> dict:
    """What `python -m suite report` computes before writing, without writing into run_dir."""
    run = open_run(run_dir)
    states = experiment_states(run)
    metrics, not_run, errors = compute_metrics(run.tables() | run_env_table(run), states)
    return {"metrics": metrics, "not_run": not_run, "errors": errors, "states": states}


@pytest.fixture(scope="module", params=REBUILT)
def rebuilt(request) -> tuple[Path, dict]:
    run_dir = REFERENCE / request.param
    return run_dir, _rebuild(run_dir)


def test_claim_runs_are_found():
    assert {"h200/quick-5753865", "h200/full-dd54683", "h100/c1c3-0e6e473"} <= set(CLAIM_RUNS)


def test_metric_rows_follow_from_the_raw_tables(rebuilt):
    """The experiments' summarize() on the committed results/ gives the committed metrics.csv:
    every row, value and interval bound (a wrong reference cannot hide behind its claims.json)."""
    run_dir, r = rebuilt
    assert r["errors"] == []
    got = r["metrics"].reset_index(drop=True)
    committed = pd.read_csv(run_dir / "metrics.csv")
    committed = committed.reindex(columns=list(dict.fromkeys([*committed, *NUMBERS])))  # older
    keys = ["claim", "metric"]
    assert got[keys].values.tolist() == committed[keys].values.tolist()
    for col in TEXT:
        committed[col] = committed[col].fillna("").astype(str)
    wrong = [
        (row.claim, row.metric, col, row[col], committed.at[i, col])
        for i, row in got.iterrows()
        for col in NUMBERS + TEXT
        if not _same(float(row[col]) if col in NUMBERS else row[col], committed.at[i, col])
    ]
    assert wrong == []


def test_verdicts_follow_from_the_committed_metric_rows(rebuilt):
    """Today's rules on the committed metrics.csv (and the run's not-run experiments) give the
    committed claims.json: every claim's verdict, value, interval and alternatives."""
    run_dir, r = rebuilt
    committed = {c["id"]: c for c in json.loads((run_dir / "claims.json").read_text())}
    assert committed.keys() == {c.id for c in load_claims()}  # every claim of the ledger
    verdicts = evaluate(pd.read_csv(run_dir / "metrics.csv"), r["not_run"])
    ranks = ranks_notes(verdicts, r["states"])
    wrong = []
    for v in verdicts:
        got, want = {**v.to_json(), "ranks": ranks.get(v.id, "")}, committed[v.id]
        wrong += [(v.id, k, got[k], want.get(k)) for k in JUDGED if not _same(got[k], want.get(k))]
        alts = [[a.get(k) for k in ALTERNATIVE] for a in want["alternatives"]]
        mine = [[a[k] for k in ALTERNATIVE] for a in got["alternatives"]]
        if len(alts) != len(mine) or not all(map(_same, sum(mine, []), sum(alts, []))):
            wrong.append((v.id, "alternatives", mine, alts))
    assert wrong == []


@pytest.mark.parametrize(
    "reference",
    ["h200/quick-5753865", "h200/full-dd54683", "h100/quick-c2036da", "h100/full-c2036da"],
)
def test_reference_is_one_complete_run_of_one_commit(reference):
    ref = REFERENCE / reference
    profile = ref.name.split("-")[0]
    env = json.loads((ref / "env.json").read_text())
    sha = env["git"]["sha"]
    assert not env["git"]["dirty"] and env["profile"] == profile
    done = {
        p.name.removesuffix(".done.json"): json.loads(p.read_text())
        for p in (ref / "results").glob("*.done.json")
    }
    assert set(done) == set(REGISTRY)  # every experiment reproduce runs
    for name, d in done.items():
        assert sha.startswith(d["git"]) and d["profile"] == env["profile"], name
    runs = pd.read_csv(ref / "results" / "training_runs.csv")
    if profile == "full":  # the quick profile's global run may not fit its budget
        assert runs.status.str.startswith("ok").all(), runs
    # not-run only where the ledger says why the experiment cannot give the claim's metric
    absent = {c.id: c.absent for c in load_claims() if c.absent}
    for c in json.loads((ref / "claims.json").read_text()):
        if c["verdict"] == "not-run":
            assert c["id"] in absent and c["reason"].startswith(absent[c["id"]]), c["id"]
