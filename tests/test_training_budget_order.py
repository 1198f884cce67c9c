"""The training time budget (time_budget_s) is spent in the runs' order, whichever invocation ran
them: splitting a run into invocations (`reproduce --budget`) never changes which runs it has.
A fake clock: every rank-step costs exactly one second; the model step itself is faked."""

import time
import types

import pandas as pd

from suite.experiments import training
from suite.experiments.training import emulated as training_emulated
from suite.experiments.training import parts as training_parts
from suite.rundir import RunContext, RunDir
from suite.train.data import load_corpus

REAL_FITS = training_parts.Parts.fits
SMALL = {"steps": 1, "long_steps": 1, "global8_steps": 1, "skip_maxseq": True, "skip_loss": True}


class Clock:
    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


def _runs(tmp_path, monkeypatch, budget_s, defer=()):
    """The emulated runs' status table under a fake clock; `defer`: runs this invocation leaves."""
    clock = Clock()
    monkeypatch.setattr(
        training_emulated, "time", types.SimpleNamespace(perf_counter=clock.perf_counter)
    )
    monkeypatch.setattr(training_emulated, "_warmup", lambda *a, **k: None)

    def emulate(model, opt, corpus, plan, **kw):
        clock.now += plan.steps * plan.world
        return pd.DataFrame({"step": [0], "rank": [0], "compute_s": [1.0]})

    monkeypatch.setattr("suite.train.emulate.emulate", emulate)

    def fits(self, what, need_s):
        if what.removeprefix("the run ") in defer:
            self.deferred.append((what, need_s))
            return False
        return REAL_FITS(self, what, need_s)

    monkeypatch.setattr(training_parts.Parts, "fits", fits)
    extra = {**SMALL, "time_budget_s": budget_s, "rank_batch_s_guess": 1.0}
    ctx = RunContext(
        run=RunDir(tmp_path / "run"),
        profile="cpu",
        device="cpu",
        options={"deadline": time.time() + 1e6, "training": extra},
    )
    prof = training._profile(ctx)
    corpus = load_corpus(prof["corpus"], prof["mix"], ctx.seed)
    long_corpus = load_corpus(prof["corpus"], prof["long_mix"], ctx.seed)
    budgets = {
        "default": training._budgets(ctx, corpus, prof)[0],
        "long": training._budgets(ctx, long_corpus, prof)[0],
    }
    _, runs, _, _ = training_emulated._emulated_runs(ctx, prof, budgets, "", 100.0)
    return runs.set_index("run").status


def test_a_run_left_for_the_next_invocation_keeps_its_place_in_the_budget(tmp_path, monkeypatch):
    # 16-rank runs cost 16 s, 8-rank runs 8 s: a 40 s budget holds the first two runs and one
    # 8-rank run
    whole = _runs(tmp_path / "whole", monkeypatch, 40.0)
    ok = set(whole.index[whole.str.startswith("ok")])
    first = whole.index[0]
    assert first in ok and 0 < len(ok) < len(whole), whole.to_dict()
    # the first run left to a second invocation: the later runs must not take its budget
    split1 = _runs(tmp_path / "split", monkeypatch, 40.0, defer={first})
    assert first not in set(split1.index)  # deferred: no status yet
    split2 = _runs(tmp_path / "split", monkeypatch, 40.0)
    assert split2[first] == "ok"
    assert set(split2.index[split2.str.startswith("ok")]) == ok
    skipped = split2[~split2.str.startswith("ok")]
    assert skipped.str.contains("time budget").all()
