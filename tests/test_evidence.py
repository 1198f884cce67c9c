"""Evidence kinds come from the data a number was computed on, never from a metric's name."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from suite import evidence, experiments
from suite.claims import load_claims
from suite.evidence import Evidence

ROOT = Path(__file__).resolve().parents[1]
H100_QUICK = ROOT / "reports/reference/h100/quick-c2036da"


def test_full_layers_are_the_model_configs():
    from suite.model import CONFIGS

    real = {name: cfg.num_layers for name, cfg in CONFIGS.items() if name != "tiny"}
    assert evidence.FULL_LAYERS == real


def _ranks(emulated, layers=1, model="wan-1.3b", world=16):
    return pd.DataFrame(
        {"emulated": [emulated] * 2, "layers": layers, "model": model, "world": world}
    )


@pytest.mark.parametrize(
    "table,declared,device,label",
    [
        (_ranks(True), "ranks", "cuda", "16 ranks emulated on one GPU, 1-of-30-block stand-in"),
        (_ranks(False, layers=30, world=2), "ranks", "cuda", "2 real ranks on GPU"),
        (
            _ranks(True, model="tiny", layers=2),
            "ranks",
            "cpu",
            "16 ranks emulated on one CPU, stand-in model",
        ),
        (pd.DataFrame({"N": [1]}), "measured", "cuda", "measured on GPU"),  # an op: no model
        (_ranks(True, layers=30).drop(columns="emulated"), "measured", "cuda:0", "measured on GPU"),
    ],
)
def test_label_of_a_table_reads_its_columns(table, declared, device, label):
    ev = evidence.of_table("training_x", {"training_x": table}, declared, {"training": device})
    assert ev.label() == label
    assert Evidence.parse(ev.key()) == ev


def test_simulated_tables_take_model_and_device_from_the_fit():
    tables = {
        "balance_ranks": pd.DataFrame({"ranks": [8, 16], "compute_s": [1.0, 2.0]}),
        "costmodel_fit": pd.DataFrame({"model": ["wan-1.3b"], "layers": [30]}),
    }
    devices = {"balance": "cpu", "costmodel": "cuda"}
    ev = evidence.of_table("balance_ranks", tables, "simulated@costmodel_fit", devices)
    assert ev == Evidence("simulated", gpu=True, model="wan-1.3b", layers=30)
    assert ev.label() == "simulated from a GPU cost fit of this run"


def test_a_bad_declaration_or_key_is_refused():
    with pytest.raises(ValueError, match="EVIDENCE of t must say one of"):
        evidence.of_table("t", {"t": pd.DataFrame()}, "guessed", {})
    with pytest.raises(ValueError, match="evidence how must be one of"):
        Evidence.parse("observed;gpu=1")


def test_weakest_of_several_kinds():
    measured = Evidence("measured", True, "wan-1.3b", 30).key()
    emulated = Evidence("emulated", True, "wan-1.3b", 1, 16).key()
    assert evidence.weakest([measured, emulated, ""]) == emulated
    assert evidence.weakest(["", ""]) == ""


def test_every_declared_table_belongs_to_its_experiment():
    for name in experiments.available():
        for table, how in getattr(experiments.load(name), "EVIDENCE", {}).items():
            assert evidence.writer(table, experiments.REGISTRY) == name, (name, table)
            assert how.partition("@")[0] in evidence.DECLARED, (name, table, how)


@pytest.fixture(scope="module")
def reference_metrics():
    from suite.report.build import compute_metrics, experiment_states, open_run, run_env_table

    run = open_run(H100_QUICK)
    states = experiment_states(run)
    metrics, _, _ = compute_metrics(run.tables() | run_env_table(run), states)
    return metrics


def test_every_metric_of_a_gpu_reference_declares_its_evidence(reference_metrics):
    m = reference_metrics
    missing = m[m.evidence_kind == ""]
    assert missing.empty, missing[["claim", "metric", "evidence"]].to_string()
    primaries = {(c.id, k) for c in load_claims() for k in c.primary}
    judged = m[[(c, k) in primaries for c, k in zip(m.claim, m.metric, strict=True)]]
    assert len(judged) >= 15
    kinds = {r.claim: Evidence.parse(r.evidence_kind) for r in judged.itertuples()}
    # the labels the issue found false: C1, C10, C18 rest on 16 emulated ranks of a 1-block model
    for cid in ("C1", "C10", "C18"):
        assert kinds[cid].how == "emulated" and kinds[cid].ranks == 16, cid
        assert kinds[cid].stand_in, cid
    assert kinds["C4"].how == "simulated" and kinds["C11"].how == "measured"
    assert not kinds["C17"].stand_in  # e2e: the whole 30-block model


def test_methods_text_names_each_claims_primary_key():
    from suite.report.html import CHOICES

    primary = {c.id: c.primary[0].partition(":")[2] or c.primary[0] for c in load_claims()}
    named = [m for _, text in CHOICES for m in re.findall(r"\b(C\d+): ([a-z0-9_]+)", text)]
    assert named, "the Methods name no claim's key"
    for cid, key in named:
        assert key == primary[cid], f"Methods say {cid} is {key}; the ledger: {primary[cid]}"
