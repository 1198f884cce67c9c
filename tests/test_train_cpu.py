"""The trainer on CPU: a two-process gloo run per policy, instrumentation, determinism, emulation."""

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from launch_ranks import torchrun

from suite.train.emulate import collective_seconds, compose_steps
from suite.train.instrument import LOG_FIELDS
from suite.train.logs import read_logs, step_table, summary_table

COMMON = [
    "--model",
    "tiny",
    "--mix",
    "tiny",
    "--steps",
    "3",
    "--corpus-size",
    "400",
    "--dtype",
    "fp32",
    "--device",
    "cpu",  # gloo on CPU even where a GPU exists (auto would take NCCL: two ranks, one GPU)
]


def _run(args, nproc=None, timeout=120):
    if nproc:
        return torchrun(["-m", "suite.train", *args], nproc, timeout=timeout)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "suite.train", *args]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


@pytest.fixture(scope="module")
def gloo_runs(tmp_path_factory):
    out = {}
    for policy in ("equal-token", "dual"):
        d = tmp_path_factory.mktemp(policy)
        _run([*COMMON, "--policy", policy, "--out", str(d)], nproc=2)
        out[policy] = d
    return out


@pytest.mark.parametrize("policy", ["equal-token", "dual"])
def test_two_rank_gloo_run_logs_every_rank(gloo_runs, policy):
    d = gloo_runs[policy]
    ranks = read_logs(d)
    assert set(LOG_FIELDS) <= set(ranks.columns)
    assert sorted(ranks["rank"].unique()) == [0, 1]
    assert len(ranks) == 2 * 3
    assert (ranks.world == 2).all() and (ranks.policy == policy).all()
    # instrumentation: phases are non-negative and sum to the step (data is outside the step)
    parts = ranks.compute_s + ranks.collective_wait_s + ranks.optimizer_s
    assert (ranks[["compute_s", "collective_wait_s", "optimizer_s"]] >= 0).all().all()
    np.testing.assert_allclose(parts, ranks.step_s, rtol=1e-6, atol=1e-6)
    assert (ranks.tokens == ranks.B * ranks.S).all() and (ranks.samples == ranks.B).all()
    assert np.isfinite(ranks.loss).all()
    steps = pd.read_csv(d / "steps.csv")
    assert len(steps) == 3 and (steps.tokens == ranks.groupby("step").tokens.sum().to_numpy()).all()
    assert json.loads((d / "config.json").read_text())["world"] == 2


def test_policies_train_on_different_batches_from_same_data(gloo_runs):
    a, b = (read_logs(gloo_runs[p]) for p in ("equal-token", "dual"))
    assert (a.B * a.S).max() <= 320 or (a.B == 1).any()  # equal-token: B*S <= M_tok (or B=1)
    assert not a[["B", "S"]].equals(b[["B", "S"]])


def test_emulator_matches_real_two_rank_losses(gloo_runs, tmp_path):
    """Virtual ranks with 1/R gradient weights train exactly like two real gloo ranks."""
    _run([*COMMON, "--policy", "dual", "--emulate-ranks", "2", "--out", str(tmp_path)])
    real = step_table(read_logs(gloo_runs["dual"]))
    emu = step_table(read_logs(tmp_path))
    np.testing.assert_allclose(emu.loss, real.loss, rtol=1e-4)
    assert (emu.tokens.to_numpy() == real.tokens.to_numpy()).all()


def test_seeded_losses_are_deterministic(tmp_path):
    from suite.train.trainer import TrainArgs, train

    torch.set_num_threads(1)
    losses = []
    for k in range(2):
        out = train(
            TrainArgs(
                model="tiny",
                mix="tiny",
                steps=3,
                corpus_size=400,
                dtype="fp32",
                out=str(tmp_path / f"r{k}"),
                device="cpu",
            )
        )
        losses.append(read_logs(out).loss.to_numpy())
    np.testing.assert_array_equal(losses[0], losses[1])


def test_emulator_composes_hand_made_timings():
    rows = pd.DataFrame(
        {
            "step": [0, 0, 0, 1, 1, 1],
            "rank": [0, 1, 2] * 2,
            "compute_s": [1.0, 2.0, 3.0, 0.5, 0.5, 0.5],
            "optimizer_s": [0.1] * 3 + [0.2] * 3,
            "tokens": [10, 20, 30, 10, 10, 10],
            "samples": 1,
            "loss": 1.0,
            "collective_wait_s": 0.0,
            "peak_mem_bytes": 0,
            "peak_reserved_bytes": 0,
            "policy": "x",
            "adaln": "wan",
            "world": 3,
            "emulated": True,
        }
    )
    c = compose_steps(rows, collective_s=0.25)
    np.testing.assert_allclose(c.step_s, [3.35] * 3 + [0.95] * 3)
    np.testing.assert_allclose(c.collective_wait_s, [2.25, 1.25, 0.25, 0.25, 0.25, 0.25])
    s = step_table(c)
    np.testing.assert_allclose(s.throughput, [60 / 3.35, 30 / 0.95])
    np.testing.assert_allclose(s.rank_cv, [np.std([1, 2, 3]) / 2, 0.0])
    np.testing.assert_allclose(s.maxmean, [1.5, 1.0])
    summ = summary_table(s)
    np.testing.assert_allclose(summ.throughput, 90 / 4.3)


def test_collective_model():
    assert collective_seconds(1e9, 1) == 0.0
    t8 = collective_seconds(1e9, 8, busbw_gbps=100, latency_s=0)
    np.testing.assert_allclose(t8, 2 * 7 / 8 * 1e9 / 100e9)


def test_stepfn_returns_seconds(tmp_path):
    from suite.model.wan import token_grid
    from suite.train.stepfn import make_step_fn

    assert token_grid(32760) == (21, 30, 52) and token_grid(75600) == (21, 45, 80)
    step = make_step_fn("tiny", dtype="fp32")
    sec, peak, opt_s = step(2, 64)
    assert sec > 0 and peak == 0 and 0 < opt_s < sec


def test_cli_help():
    p = subprocess.run(
        [sys.executable, "-m", "suite.train", "--help"], capture_output=True, text=True
    )
    assert p.returncode == 0 and "--emulate-ranks" in p.stdout and "--policy" in p.stdout


def test_shapes_and_training_experiments_on_cpu(tmp_path):
    """The experiments' CPU paths (tiny model): tables, metric keys of the ledger, figures."""
    from suite.experiments import training
    from suite.experiments.costmodel import sweep as shapes
    from suite.report.plots import shapes as shapes_plots
    from suite.report.plots import training as training_plots
    from suite.rundir import RunContext, RunDir

    ctx = RunContext(
        RunDir(tmp_path),
        "cpu",
        "cpu",
        options={
            "shapes": {
                "buckets": (64, 256),
                "m_tok": 512,
                "ladder_tokens": 128,
                "repeats": 2,
                "max_repeats": 2,
            },
            "training": {"steps": 2, "long_steps": 2, "loss_steps": 4, "corpus": 1500},
        },
    )
    sw = shapes.run(ctx)["shapes_sweep"]
    assert list(sw.columns[:12]) == [
        "B",
        "S",
        "tokens",
        "bs2",
        "repeat",
        "step_s",
        "peak_mem_bytes",
        "optimizer_s",
        "device",
        "model",
        "layers",
        "dim",
    ]
    from suite.balance.shapebench import equal_token_grid

    n_shapes = len(equal_token_grid((64, 256), 512, 128))
    assert len(sw) == 2 * n_shapes and shapes.summarize({"shapes_sweep": sw}).empty
    assert ((sw.optimizer_s > 0) & (sw.optimizer_s < sw.step_s)).all()
    ctx.run.write_table("shapes_sweep", sw)
    tables = training.run(ctx)
    for k, v in tables.items():
        ctx.run.write_table(k, v)
    m = training.summarize(ctx.run.tables())
    keys = set(m["metric"])
    assert {
        "r_tokens_steps",
        "r_bs2_steps",
        "cv_reduction_emulated",
        "rank_cv_emulated",
        "step_cv_emulated",
        "throughput_gain_8_emulated",
        "throughput_gain_16_emulated",
        "floor_gain_emulated",
        "loss_final_rel_diff_policy",
        "loss_final_rel_diff_global",
        "rank_cv_global_emulated",
        "throughput_gain_global_16_emulated",
        "throughput_gain_global_8_emulated",
    } <= keys
    assert m.loc[m.metric == "rank_cv_emulated", "baseline"].notna().all()
    # the global policy's loss curve: a 1-rank global plan, tokens per step in the row
    lo = tables["training_loss"]
    assert set(lo.run) >= {"equal-token/wan", "dual/wan", "global/wan"}
    g = m.set_index("metric").loc["loss_final_rel_diff_global"]
    assert "mean tokens per step" in g.conditions and g.claim == "C15"
    # C15's runs once per seed of the cpu profile (2), paired within a seed: each seed its own
    # draw of data and weights, the rows a mean over the seeds with a t-interval
    assert sorted(lo.seed.unique()) == [0, 1]
    assert (lo.groupby("seed").run.nunique() == lo.run.nunique()).all()
    first = lo[lo.run == "equal-token/wan"].groupby("seed").loss.apply(list)
    assert first[0] != first[1]
    assert "mean over 2 seeds" in g.conditions and g.ci_low <= g.value <= g.ci_high
    tr = tables["training_ranks"]
    # C7: equal-token and dual on their own 8-rank plans; the global policy also at 8
    at8 = tr.run.str.endswith("@8")
    assert set(tr.run[at8]) == {f"default/{p}/wan@8" for p in ("equal-token", "dual", "global")}
    assert (tr.world[at8] == 8).all() and (tr.world[~at8] == 16).all()
    assert set(tr["rank"][at8]) == set(range(8))
    c7 = m.set_index("metric").loc["throughput_gain_8_emulated"]
    assert c7.claim == "C7" and "own 8-rank plans" in c7.conditions
    # the per-micro-batch trace: one row per micro-batch of every rank row
    mi = tables["training_micro"]
    assert len(mi) == tr.micro_batches.sum() and {"run", "step", "rank", "micro", "B", "S",
                                                  "compute_s"} <= set(mi.columns)  # fmt: skip
    assert (mi.groupby(["run", "step", "rank"]).compute_s.sum() > 0).all()
    assert "diffusers WanTransformer3DModel" in c7.conditions
    figs = training_plots.figures(ctx.run.tables(), m) + shapes_plots.figures({"shapes_sweep": sw})
    assert {f[0] for f in figs} >= {
        "training_latency",
        "training_rank_cv",
        "training_throughput",
        "training_loss",
        "shapes_sweep",
    }


def test_fsdp2_trains_like_ddp(gloo_runs, tmp_path):
    """fully_shard on gloo: same plan, same losses as the DDP run (to float tolerance)."""
    _run([*COMMON, "--policy", "dual", "--fsdp", "--out", str(tmp_path)], nproc=2)
    fsdp = step_table(read_logs(tmp_path))
    ddp = step_table(read_logs(gloo_runs["dual"]))
    np.testing.assert_allclose(fsdp.loss, ddp.loss, rtol=1e-4)
