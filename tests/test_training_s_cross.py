"""Training tunes dual's s_cross on a grid fine enough that nearly equal sweeps train the same
batch table: the committed sweeps of one commit (three H100 runs, one H200 run; fitted p 1.328 to
1.348) pick one s_cross, where 12 quantiles of the bucket lengths picked two teeth of the
throughput's sawtooth 35% apart (18,720 and 25,200 tokens) and the runs' C18 split 33 / 50%."""

from pathlib import Path

import pytest

from suite.balance.buckets import bucket_table
from suite.balance.simulator import tune_s_cross
from suite.experiments import training
from suite.rundir import RunContext, RunDir
from suite.train.data import load_corpus

REF = Path(__file__).resolve().parents[1] / "reports" / "reference"
SWEEPS = [  # run directories whose results/ hold the sweep's cost fits
    REF / "h100" / "stability-85dc565" / "bootstrap-cpu" / "run1",
    REF / "h100" / "stability-85dc565" / "bootstrap-cpu" / "run2",
    REF / "h100" / "stability-85dc565" / "bootstrap-cpu" / "run3",
    REF / "h200" / "quick-85dc565",
]


def _tuned(run_dir: Path, **grid) -> float:
    ctx = RunContext(run=RunDir(run_dir), profile="quick", device="cuda")
    prof = training.PROFILES["quick"]
    corpus = load_corpus(prof["corpus"], prof["mix"], ctx.seed)
    if not grid:
        return training._budgets(ctx, corpus, prof)[1]
    cm, _ = training._cost_model(ctx)
    step, _ = training._tuning_model(ctx, cm)
    m_mem = training.memory_budget(cm, corpus, prof)
    return tune_s_cross(bucket_table(corpus.tokens), step, m_mem, p=cm.p, **grid)[0]


@pytest.mark.parametrize("d", SWEEPS, ids=lambda d: "/".join(d.parts[-3:]))
def test_committed_sweeps_have_their_fits(d):
    assert (d / "results" / "costmodel_fit.csv").exists()
    assert (d / "results" / "costmodel_quadratic.csv").exists()


def test_one_commits_sweeps_train_one_table():
    picks = {d: _tuned(d) for d in SWEEPS}
    assert len(set(picks.values())) == 1, picks


def test_the_coarse_grid_splits_them():
    """The same sweeps on 12 quantiles: the split the fine grid removes (keeps the test honest:
    were the sweeps identical, the test above could not fail)."""
    picks = {_tuned(d, candidates=12, spacing="quantile") for d in SWEEPS}
    assert len(picks) > 1
