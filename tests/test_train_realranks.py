"""The training experiment's real-rank path on CPU: `torchrun --nproc-per-node 2 -m suite reproduce
--only training` on gloo (SUITE_TRAINING_DEVICE=cpu: the tiny model of the cpu profile)."""

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from launch_ranks import torchrun

from suite.rundir import RunDir

ROOT = Path(__file__).resolve().parents[1]


def _torchrun_training(run, *extra):
    """`torchrun --nproc-per-node 2 -m suite reproduce --profile cpu --only training` on gloo."""
    env = {"SUITE_TRAINING_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": ""}  # gloo, on a GPU machine too
    args = [
        "-m",
        "suite",
        "reproduce",
        "--profile",
        "cpu",
        "--only",
        "training",
        "--no-report",
        "--out",
        str(run),
        *extra,
    ]
    return torchrun(args, 2, env=env, timeout=240, check=False)


def _upstream_done(run):
    # upstream experiments marked done without tables (saves the shape sweep): the training
    # experiment then falls back to p = 2 and the corpus's own budgets
    (run / "results").mkdir(parents=True)
    for name in ("shapes", "costmodel"):
        (run / "results" / f"{name}.done.json").write_text(json.dumps({"experiment": name}))


@pytest.fixture(scope="module")
def run2(tmp_path_factory):
    run = tmp_path_factory.mktemp("realranks") / "run"
    _upstream_done(run)
    t0 = time.time()
    p = _torchrun_training(run)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return run, time.time() - t0


def test_a_resumed_two_rank_run_does_not_train_the_real_ranks_again(tmp_path):
    """The two-call plan of a 2-GPU quick run: the first invocation's budget ends after the real
    runs (the emulated ones stop with TrainingIncomplete), the second reuses the real table."""
    run = tmp_path / "run"
    _upstream_done(run)
    first = _torchrun_training(run, "--budget", "1")
    assert first.returncode != 0  # rank 0: training incomplete
    saved = list((run / "results" / "training_parts").glob("real-*-w2.csv"))
    assert len(saved) == 1, first.stdout[-2000:] + first.stderr[-2000:]
    table = pd.read_csv(saved[0])
    second = _torchrun_training(run)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "real ranks (gloo)" in first.stdout + first.stderr
    assert "real ranks (gloo)" not in second.stdout + second.stderr  # not trained again
    real = RunDir(run).read_table("training_real")
    assert len(real) == len(table) and set(real.run) == set(table.run)
    assert not (run / "results" / "training_parts").exists()  # cleared when training completed


def test_two_real_ranks_write_gathered_tables(run2):
    run, seconds = run2
    assert seconds < 60, f"the two-rank CPU run took {seconds:.0f} s"
    rd = RunDir(run)
    assert rd.is_done("training") and not (run / "results" / "training.error.txt").exists()
    real = rd.read_table("training_real")
    assert set(real["run"]) == {"default/equal-token/wan", "default/dual/wan", "default/global/wan"}
    assert (real["world"] == 2).all() and (real["backend"] == "gloo").all()
    assert not real["emulated"].any()
    assert (real["busbw_gbps"] > 0).all() and real["busbw_gbps"].nunique() == 1  # measured once
    per = real.groupby(["run", "step"])["rank"].apply(sorted)
    assert all(r == [0, 1] for r in per)  # rank 0 gathered both ranks' rows of every step
    parts = real.compute_s + real.collective_wait_s + real.optimizer_s
    np.testing.assert_allclose(parts, real.step_s, rtol=1e-6, atol=1e-6)
    # the emulated 16-rank runs still ran on rank 0, on the same plan's batches
    emu = rd.read_table("training_ranks")
    at8 = emu["run"].str.endswith("@8")  # C7's pair on its own 8-rank plans
    assert (emu["world"][~at8] == 16).all() and (emu["world"][at8] == 8).all()
    assert emu["emulated"].all()
    info = rd.read_table("training_info").iloc[0]
    assert info["real_world"] == 2 and info["real_steps"] == real["step"].max() + 1
    done = rd.status()["training"]
    assert done["world_size"] == 2


def test_real_rank_metrics_and_report_note(run2):
    from suite import evidence
    from suite.claims import evaluate
    from suite.experiments import training
    from suite.report.build import ranks_notes

    run, _ = run2
    tables = {k: v for k, v in RunDir(run).tables().items() if k.startswith("training")}
    m = evidence.tag(training.summarize(tables), tables, training.EVIDENCE, {"training": "cpu"})
    keys = set(zip(m.claim, m.metric))
    # world size 2: neither the 8- nor the 16-rank key, but the generic one with K in conditions
    assert ("C7", "throughput_gain_real") in keys and ("C8", "throughput_gain_real") in keys
    assert ("C7", "throughput_gain_global_real") in keys and (
        "C8",
        "throughput_gain_global_real",
    ) in keys
    assert not any(
        k.startswith(("throughput_gain_8_real", "throughput_gain_16_real")) for _, k in keys
    )
    row = m[(m.claim == "C7") & (m.metric == "throughput_gain_real")].iloc[0]
    assert "2 real ranks (gloo" in row.conditions and row.ci_low <= row.value <= row.ci_high
    err = m[m.metric == "emulation_error_pct"]
    assert (
        len(err) == 1
        and np.isfinite(err.value.iloc[0])
        and "matched steps" in err.conditions.iloc[0]
    )
    assert ("C7", "throughput_gain_8_emulated") in keys  # the one-GPU emulation is still there
    verdicts = evaluate(m)
    c7 = next(v for v in verdicts if v.id == "C7")
    assert c7.metric == "throughput_gain_8_emulated"
    assert {"throughput_gain_real", "emulation_error_pct"} <= {a["metric"] for a in c7.alternatives}
    notes = ranks_notes(verdicts)
    assert (
        "2 real ranks on CPU, stand-in model in throughput_gain_real, throughput_gain_global_real"
        in notes["C7"]
    )
    assert "ranks emulated on one CPU" in notes["C7"].split(";")[0]


def test_eight_and_sixteen_real_ranks_use_the_claims_keys():
    from suite.experiments.training.realmetrics import real_metrics

    for K, claim in ((8, "C7"), (16, "C8")):
        rows = []
        for pol, t in (("equal-token", 1.0), ("dual", 0.8)):
            for step in range(4):
                for r in range(K):
                    rows.append(
                        {
                            "run": f"default/{pol}/wan",
                            "step": step,
                            "rank": r,
                            "world": K,
                            "backend": "nccl",
                            "model": "wan-1.3b",
                            "dim": 1536,
                            "layers": 1,
                            "S": 1560,
                            "tokens": 1000,
                            "samples": 1,
                            "loss": 1.0,
                            "compute_s": t * (1 + 0.01 * r),
                            "collective_wait_s": 0.0,
                            "optimizer_s": 0.01,
                            "step_s": t * 1.2 + step * 0.01,
                            "peak_mem_bytes": 0,
                            "peak_reserved_bytes": 0,
                        }
                    )
        out = pd.DataFrame(real_metrics({"training_real": pd.DataFrame(rows)}))
        assert list(zip(out.claim, out.metric)) == [(claim, f"throughput_gain_{K}_real")]
        assert out.value.iloc[0] > 0 and f"{K} real ranks (nccl, {K} GPUs" in out.conditions.iloc[0]
