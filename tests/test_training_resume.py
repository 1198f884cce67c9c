"""The training experiment across several invocations (`reproduce --budget`): finished emulated
runs are kept in results/training_parts/ and reused; a run that would end past the deadline stops
the experiment with TrainingIncomplete. CPU, tiny model, 1 step per run."""

import time
from pathlib import Path

import pandas as pd
import pytest

from suite.experiments import training
from suite.experiments.training import emulated as training_emulated
from suite.experiments.training import parts as training_parts
from suite.rundir import RunContext, RunDir

SMALL = {"steps": 1, "long_steps": 1, "tuned_steps": 1, "global8_steps": 1}
SMALL |= {"skip_maxseq": True, "skip_loss": True}


def _ctx(tmp_path, deadline, **extra):
    return RunContext(
        run=RunDir(tmp_path / "run"),
        profile="cpu",
        device="cpu",
        options={"deadline": deadline, "training": {**SMALL, **extra}},
    )


def test_parts_are_saved_resumed_and_cleared(tmp_path, monkeypatch):
    monkeypatch.setenv("SUITE_GIT_SHA", "aaaa111")
    monkeypatch.setenv("SUITE_GIT_DIRTY", "0")
    loss = {"skip_loss": False, "loss_steps": 1, "loss_seeds": 2}  # C15's runs: a part per seed
    ctx = _ctx(tmp_path, time.time() + 1e6, **loss)
    parts_dir = ctx.run.results / "training_parts"
    clear = training_parts.Parts.clear  # keep them for the rerun
    monkeypatch.setattr(training_parts.Parts, "clear", lambda self: None)
    first = training.run(ctx)
    saved = sorted(p.name for p in parts_dir.glob("*.csv"))
    assert saved and all(n.startswith("cpu-r16-seed0-s1-") for n in saved)
    assert {"cpu-r16-seed0-s1-c15-loss-seed0.csv", "cpu-r16-seed0-s1-c15-loss-seed1.csv"} <= set(
        saved
    )
    monkeypatch.setattr(training_parts.Parts, "clear", clear)
    # second invocation at another commit, almost no time left: every run comes from its part,
    # nothing is trained, and the parts' commit is reported (ctx.part_commits -> done.json)
    monkeypatch.setenv("SUITE_GIT_SHA", "bbbb222")
    ctx2 = _ctx(tmp_path, time.time() + 30, rank_batch_s_guess=1e6, loss_s_guess=1e6, **loss)
    second = training.run(ctx2)
    pd.testing.assert_frame_equal(
        first["training_loss"], second["training_loss"], check_dtype=False
    )
    assert ctx2.part_commits == {"aaaa111"}
    assert (
        second["training_runs"].status.str.contains("resumed")
        | ~second["training_runs"].status.eq("ok")
    ).all()
    cols = ["run", "step", "rank", "tokens", "compute_s"]
    pd.testing.assert_frame_equal(
        first["training_ranks"][cols].reset_index(drop=True),
        second["training_ranks"][cols].reset_index(drop=True),
        check_dtype=False,
    )
    assert not parts_dir.exists()  # complete: the parts are removed


def test_deadline_stops_before_a_run_that_would_end_past_it(tmp_path, monkeypatch):
    warmed = []
    real_warmup = training_emulated._warmup
    monkeypatch.setattr(
        training_emulated, "_warmup", lambda *a, **k: warmed.append(a[1]) or real_warmup(*a, **k)
    )
    ctx = _ctx(tmp_path, time.time() + 5, rank_batch_s_guess=10.0)  # 16 x 10 s > 5 s
    with pytest.raises(training.TrainingIncomplete, match="rerun the same command"):
        training.run(ctx)
    assert warmed == []  # each run warms right before it: a run that does not fit warms nothing
    out = training.run(_ctx(tmp_path, None))  # every run, each after its own warm-up
    assert len(warmed) == out["training_runs"].status.eq("ok").sum() > 0


def test_without_budget_nothing_is_kept(tmp_path):
    ctx = _ctx(tmp_path, None)
    training.run(ctx)
    assert not (ctx.run.results / "training_parts").exists()


def test_real_rank_table_is_reused_by_a_resumed_invocation(tmp_path, monkeypatch):
    """Under torchrun the real runs come first; a resumed invocation (the emulated runs did not
    all fit the first) reads the saved table on every rank instead of training again."""
    ctx = RunContext(run=RunDir(tmp_path / "run"), profile="quick", device="cpu", world_size=2)
    saved = ctx.run.results / "training_parts" / "real-quick-w2.csv"
    saved.parent.mkdir(parents=True)
    pd.DataFrame({"run": ["default/dual/wan"], "step": [0], "rank": [1]}).to_csv(saved, index=False)

    def no_group(*a, **k):
        raise AssertionError("the saved real runs must not be run again")

    monkeypatch.setattr("suite.train.realranks.init_group", no_group)
    monkeypatch.setenv("RANK", "0")
    real, rank = training._real_ranks(ctx, {"name": "quick"}, None, None)
    assert rank == 0 and list(real["run"]) == ["default/dual/wan"]
    monkeypatch.setenv("RANK", "1")
    assert training._real_ranks(ctx, {"name": "quick"}, None, None) == (None, 1)


def test_a_run_that_does_not_fit_is_left_and_later_runs_go_first(tmp_path, monkeypatch):
    """First fit: a run past the deadline is deferred, the runs after it that fit are run and
    kept, the invocation then stops naming what is left; the next one runs only that, and the
    tables come out in the runs' order."""
    parts_dir = tmp_path / "run" / "results" / "training_parts"
    real_fits = training_parts.Parts.fits
    first = "default/equal-token/wan"

    def fits(self, what, need_s):
        if what == f"the run {first}":
            self.deferred.append((what, need_s))
            return False
        return real_fits(self, what, need_s)

    monkeypatch.setattr(training_parts.Parts, "fits", fits)
    with pytest.raises(training.TrainingIncomplete, match=f"1 piece.*the run {first} needs ~"):
        training.run(_ctx(tmp_path, time.time() + 1e6))
    kept = {p.name.split("-s1-")[1] for p in parts_dir.glob("*.csv")}
    assert "default_dual_wan.csv" in kept and "long_dual_wan.csv" in kept
    assert "default_equal-token_wan.csv" not in kept
    monkeypatch.setattr(training_parts.Parts, "fits", real_fits)
    out = training.run(_ctx(tmp_path, time.time() + 1e6))
    status = out["training_runs"].set_index("run").status
    assert status[first] == "ok"
    assert (status.drop(first)[status.drop(first).str.startswith("ok")] == "ok (resumed)").all()
    assert out["training_ranks"].run.iloc[0] == first  # the runs' order, not the order run
    assert not parts_dir.exists()


def test_parts_table_defers_makes_keeps_and_resumes(tmp_path):
    """A one-table piece (the C14 probes, the C15 loss runs): deferred when it does not fit,
    else made and kept; a later invocation loads it without making it again."""
    ctx = _ctx(tmp_path, time.time() + 10)
    prof = {"name": "full", "ranks": 16}
    made = []

    def make():
        made.append(1)
        return pd.DataFrame({"S": [15600, 31200], "peak_gb": [1.5, 3.25]})

    parts = training_parts.Parts(ctx, prof)
    assert parts.table("c15-loss", 200, 60.0, make) is None and made == []  # 60 s > 10 s left
    kept = parts.table("c14-maxseq", 0, 1.0, make)
    assert made == [1] and list(kept.S) == [15600, 31200]
    with pytest.raises(training.TrainingIncomplete, match="c15-loss needs ~60 s"):
        parts.raise_if_deferred()
    again = training_parts.Parts(_ctx(tmp_path, time.time() + 10), prof)
    pd.testing.assert_frame_equal(again.table("c14-maxseq", 0, 1.0, make), kept)
    assert made == [1] and again.seconds > 0 and not again.deferred
    again.raise_if_deferred()  # nothing left: no error


def test_s_cross_is_tuned_on_the_sweeps_quadratic_fit_where_there_is_one(tmp_path):
    """The dual budget's p comes from the power law; its s_cross from a simulation whose step
    model is the sweep's quadratic fit when the costmodel experiment wrote one (training_info
    says which), else the power law."""
    import numpy as np

    from suite.balance.costmodel import QuadraticCost
    from suite.balance.fit_table import model_from_fit

    ctx = _ctx(tmp_path, None)
    ref = Path(__file__).resolve().parent.parent / "reports/reference/h200/quick-5753865/results"
    fit = pd.read_csv(ref / "costmodel_fit.csv")
    ctx.run.write_table("costmodel_fit", fit)
    cm = model_from_fit(fit)
    corpus = pd.DataFrame({"tokens": np.repeat([1560, 3600, 7800, 14040, 28800, 75600], 50)})
    prof = {"m_mem_factor": 3}
    assert training._tuning_model(ctx, cm) == (cm, "costmodel_fit")
    b_pow, s_pow, on = training._budgets(ctx, corpus, prof)
    assert on == "costmodel_fit" and b_pow.p == pytest.approx(cm.p)
    ctx.run.write_table("costmodel_quadratic", pd.read_csv(ref / "costmodel_quadratic.csv"))
    model, on = training._tuning_model(ctx, cm)
    assert isinstance(model, QuadraticCost) and on == "costmodel_quadratic"
    b_quad, s_quad, on = training._budgets(ctx, corpus, prof)
    assert on == "costmodel_quadratic" and b_quad.p == b_pow.p and b_quad.m_mem == b_pow.m_mem
    assert b_quad.m_comp == pytest.approx(b_quad.m_mem * s_quad ** (b_quad.p - 1))


def test_long_video_runs_use_their_own_mix_s_cross(tmp_path, monkeypatch):
    """The long-video pair (C9) plans with the s_cross tuned on the long mix's buckets, recorded in
    training_info (s_cross_long, m_comp_long) beside the default mix's; C9's conditions say so."""
    monkeypatch.setenv("SUITE_GIT_SHA", "aaaa111")
    monkeypatch.setenv("SUITE_GIT_DIRTY", "0")
    seen = []
    plan = training_emulated._plan

    def spy(ctx, corpus, policy, budgets, world, steps):
        seen.append((id(corpus), budgets))
        return plan(ctx, corpus, policy, budgets, world, steps)

    monkeypatch.setattr(training_emulated, "_plan", spy)
    ctx = _ctx(tmp_path, time.time() + 1e6)
    tables = training.run(ctx)
    info = tables["training_info"].iloc[0]
    assert {"long/equal-token/wan", "long/dual/wan"} <= set(tables["training_runs"].run)
    default_id = seen[0][0]  # the first runs are the default mix's; the long pair's corpus differs
    long_budgets = [b for c, b in seen if c != default_id]
    default_budgets = [b for c, b in seen if c == default_id]
    assert len(long_budgets) == 2 and len(default_budgets) >= 3
    assert all(b.m_comp == pytest.approx(info["m_comp_long"]) for b in long_budgets)
    assert all(b.m_comp == pytest.approx(info["m_comp"]) for b in default_budgets)
    assert info["m_comp_long"] == pytest.approx(
        info["m_mem"] * info["s_cross_long"] ** (info["p"] - 1)
    )
    from suite.experiments.training.summary import _long_budget

    assert f"s_cross {info['s_cross_long']:.0f} tuned on this mix" in _long_budget(tables)
    assert (
        _long_budget({"training_info": tables["training_info"].drop(columns="s_cross_long")}) == ""
    )
