"""The committed H200 references are what they say: one run of one commit, every experiment done,
and every verdict the one today's rules give on the run's own metric rows (no typed-in verdict)."""

import json
from pathlib import Path

import pandas as pd
import pytest

from suite.claims import evaluate, load_claims
from suite.experiments import REGISTRY

REF = Path(__file__).resolve().parents[1] / "reports" / "reference" / "h200"


@pytest.mark.parametrize("reference", ["quick-5753865", "full-dd54683"])
def test_reference_is_one_complete_run_of_one_commit(reference):
    ref = REF / reference
    env = json.loads((ref / "env.json").read_text())
    sha = env["git"]["sha"]
    assert not env["git"]["dirty"] and env["profile"] == reference.split("-")[0]
    done = {
        p.name.removesuffix(".done.json"): json.loads(p.read_text())
        for p in (ref / "results").glob("*.done.json")
    }
    assert set(done) == set(REGISTRY)  # every experiment reproduce runs
    for name, d in done.items():
        assert sha.startswith(d["git"]) and d["profile"] == env["profile"], name
    runs = pd.read_csv(ref / "results" / "training_runs.csv")
    if reference.startswith("full"):  # the quick profile's global run may not fit its budget
        assert runs.status.str.startswith("ok").all(), runs


@pytest.mark.parametrize("reference", ["quick-5753865", "full-dd54683"])
def test_reference_verdicts_follow_from_its_metric_rows(reference):
    ref = REF / reference
    committed = {c["id"]: c for c in json.loads((ref / "claims.json").read_text())}
    assert committed.keys() == {c.id for c in load_claims()}  # every claim of the ledger
    for v in evaluate(pd.read_csv(ref / "metrics.csv")):
        c = committed[v.id]
        assert (v.verdict, v.metric) == (c["verdict"], c["metric"]), v.id
        measured = float("nan") if c["measured"] is None else c["measured"]  # JSON null: no value
        assert v.measured == pytest.approx(measured, nan_ok=True), v.id
    # not-run only where the ledger says why the experiment cannot give the claim's metric
    absent = {c.id: c.absent for c in load_claims() if c.absent}
    for c in committed.values():
        if c["verdict"] == "not-run":
            assert c["id"] in absent and c["reason"].startswith(absent[c["id"]]), c["id"]


@pytest.mark.parametrize("reference", ["quick-5753865", "full-dd54683"])
def test_reference_metric_rows_follow_from_its_raw_tables(reference):
    """The experiments' summarize() on the committed results/ gives the committed metrics.csv:
    every row, value and interval bound (a wrong reference cannot hide behind its claims.json)."""
    from suite.report.build import compute_metrics, experiment_states, open_run

    run = open_run(REF / reference)
    metrics, not_run, errors = compute_metrics(run.tables(), experiment_states(run))
    assert not errors and not not_run
    committed = pd.read_csv(REF / reference / "metrics.csv")
    keys = ["claim", "metric"]
    assert metrics[keys].values.tolist() == committed[keys].values.tolist()
    for col in ("value", "ci_low", "ci_high", "baseline"):
        got, want = metrics[col].astype(float).to_numpy(), committed[col].astype(float).to_numpy()
        assert got == pytest.approx(want, rel=1e-9, nan_ok=True), col
