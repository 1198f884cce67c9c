"""C10's baseline trained: the training experiment trains equal-token at the M_tok tuned for balance
(default/equal-token-tuned/wan) and measures the dual run's peak memory over it; the readers of
the plain equal-token run (C1's population, C4-C10's rows, the simulator's validation) do not
take it. CPU, tiny model; peaks are not measured on CPU, so the metric test writes its own."""

import math
import time

import numpy as np
import pandas as pd
import pytest

from suite.balance.validate import emulation_error
from suite.experiments import training
from suite.experiments.training.peakmem import tuned_token_budget
from suite.rundir import RunContext, RunDir
from suite.train.data import load_corpus

TUNED = "default/equal-token-tuned/wan"
BASE, DUAL = "default/equal-token/wan", "default/dual/wan"
SMALL = {"steps": 2, "long_steps": 1, "global8_steps": 0, "skip_maxseq": True, "skip_loss": True}


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    ctx = RunContext(
        run=RunDir(tmp_path_factory.mktemp("tuned") / "run"),
        profile="cpu",
        device="cpu",
        options={"deadline": time.time() + 1e6, "training": SMALL},
    )
    return training.run(ctx)


def test_the_tuned_baseline_trains_at_the_tuned_token_budget(tables):
    info = tables["training_info"].iloc[0]
    prof = training.PROFILES["cpu"]
    corpus = load_corpus(prof["corpus"], prof["mix"], 0)
    m_tok = tuned_token_budget(info.m_comp, info.p, float(corpus.tokens.max()))
    assert info.m_tok_tuned == m_tok
    assert m_tok < info.m_mem  # the tuned budget is tighter: the run differs from the plain one
    runs = list(tables["training_runs"].run)
    assert tables["training_runs"].set_index("run").status[TUNED] == "ok"
    # after the paper's five runs, before the 8-rank pair
    assert runs.index(TUNED) == 5 and runs[6] == BASE + "@8"
    ranks = tables["training_ranks"]
    r = ranks[(ranks.run == TUNED) & (ranks.B > 0)]
    assert r.step.nunique() == prof["tuned_steps"] and (r.policy == "equal-token").all()
    want = np.maximum(1, np.floor(m_tok / r.S.to_numpy(float)))
    np.testing.assert_array_equal(r.B.to_numpy(), want)
    plain = ranks[(ranks.run == BASE) & (ranks.B > 0)]
    assert (plain.B == np.maximum(1, np.floor(info.m_mem / plain.S))).all()


def _with_peaks(tables):
    """The tables with peaks as a GPU would record them: a fixed part, bytes per token and a
    seeded scatter (so the steps' peaks differ where their largest batches tie)."""
    ranks = tables["training_ranks"].copy()
    scatter = np.random.default_rng(0).uniform(0, 2**28, len(ranks))
    ranks["peak_mem_bytes"] = 2**30 + 4096.0 * ranks.tokens + scatter
    ranks["peak_reserved_bytes"] = ranks["peak_mem_bytes"] * 1.25
    return {**tables, "training_ranks": ranks}


def _metrics(tables) -> pd.DataFrame:
    return training.summarize(tables).set_index("metric")


def test_c10_measured_row_is_dual_over_the_trained_tuned_run(tables):
    assert "peak_vram_util_gain_tuned_measured" not in _metrics(tables).index  # CPU: no peaks
    t = _with_peaks(tables)
    ranks, info = t["training_ranks"], t["training_info"].iloc[0]

    def mean_step_peak(run):
        return ranks[ranks.run == run].groupby("step").peak_mem_bytes.max().mean()

    want = 100 * (mean_step_peak(DUAL) / mean_step_peak(TUNED) - 1)
    row = _metrics(t).loc["peak_vram_util_gain_tuned_measured"]
    assert row.value == pytest.approx(want, rel=1e-12)
    assert row.claim == "C10" and row.ci_low < row.value < row.ci_high and abs(want) > 0.1
    assert f"M_tok {info.m_tok_tuned:.0f}" in row.conditions and "measured" in row.conditions
    assert f"{mean_step_peak(TUNED) / 2**30:.2f} GiB" in row.conditions


def test_plain_equal_token_readers_do_not_take_the_tuned_run(tables):
    t = _with_peaks(tables)
    ranks = t["training_ranks"]
    without = {**t, "training_ranks": ranks[ranks.run != TUNED]}
    got, ref = _metrics(t), _metrics(without)
    assert "peak_vram_util_gain_tuned_measured" not in ref.index
    got = got.drop("peak_vram_util_gain_tuned_measured")
    # C1's population, C4-C10's rows (the modelled _tuned row included): as without the run
    assert list(got.index) == list(ref.index)
    for col in ("value", "ci_low", "ci_high", "baseline"):
        np.testing.assert_array_equal(got[col].to_numpy(float), ref[col].to_numpy(float))
    assert (got.conditions == ref.conditions).all()
    # the simulator's validation calibrates on the plain run; the tuned one is held out
    err = emulation_error(ranks, 0.05, draws=4, resamples=10)
    assert err["baseline"] == BASE and math.isfinite(err["value"])
