"""training: the reference trainer on one GPU with emulated ranks (C1/C2 on steps, C4-C10, C14,
C15, C17, C18), and under torchrun with K > 1 processes also with K real ranks (C7/C8).

Model: diffusers' WanTransformer3DModel in the Wan 2.1 1.3B configuration with `layers` of its 30
blocks (a k-block stand-in: one 16-rank emulated step must stay a few seconds), random init, bf16
as diffusers casts it, per-block gradient checkpointing as Wan training uses it; the cpu profile
trains the tiny config in fp32 (tests; SUITE_TRAINING_DEVICE=cpu runs a shorter one under
reproduce). Every run is a policy's Plan (suite.balance.plan) executed by
suite.train.step.train_step: the emulated ranks, the C14 probes, the C15 loss runs and the real
ranks alike. Steps per run, the loss runs' seeds and the time budget are PROFILES; the emulated
runs stop at time_budget_s, spent in the runs' order, so a split into invocations never changes
which runs there are. Real ranks (torchrun, K GPUs) train the three own policies on the default
mix before the emulation.

Budgets (one data order and seed for every run; a fresh model with the same initial weights):
p from costmodel_fit (else a fit of shapes_sweep, else 2); M_mem = min(the costmodel's M_mem,
m_mem_factor x the longest sample): the memory fit of a k-block model would allow far more than
the 30-block model holds, and at ~1.3x the longest sample dual degenerates to equal-token.
s_cross is tuned by the simulator on its fine geometric grid for that M_mem, stepping with the
sweep's quadratic fit where there is one (_tuning_model), on each mix's own buckets;
M_comp = M_mem * s_cross^(p-1). Equal-token uses M_tok = M_mem (the same memory cap).
Loss normalisation: each micro-batch's loss is the mean over its latent elements times the plan's
weight (1/world for a bucket policy's one batch per rank, tokens / step tokens for the global
policy); gradients are summed over ranks. Noise per (seed, sample, epoch): paired across policies.

With `reproduce --budget` each finished emulated run, the C14 probes and each seed's C15 loss runs
are kept in results/training_parts/ (parts.py) and reused by the next invocation.

One module per job; the measuring ones need torch, the metric ones read the tables alone, so
`report RUN_DIR` recomputes every number: __init__ (profiles, budgets, run, summarize), common
(cost model, fresh model, a policy's Plan), emulated (training_runs, training_ranks,
training_micro), probes (C14 training_maxseq, C15 training_loss), parts (resumable pieces),
summary (the emulated metric rows), runstats (two runs compared step by step), peakmem (C10),
losscurves (C15), realmetrics (C7/C8 of the real ranks).
"""

from __future__ import annotations

import math
import os

import numpy as np
import pandas as pd

from suite.experiments.training.common import _cost_model, _new_model
from suite.experiments.training.emulated import _emulated_runs, tuned_budgets
from suite.experiments.training.parts import TrainingIncomplete as TrainingIncomplete  # run's
from suite.experiments.training.probes import _loss_runs, _maxseq
from suite.rundir import RunContext, read_csv

NAME = "training"
# SUITE_TRAINING_DEVICE=cpu (tests only): run on CPU with the tiny model (the cpu profile) so the
# real-rank path can be tested with `torchrun --nproc-per-node 2 -m suite reproduce` on gloo.
NEEDS = "cpu" if os.environ.get("SUITE_TRAINING_DEVICE") == "cpu" else "cuda"
# how its tables were obtained (suite.evidence): rank tables say emulated or real per row
SPLITS_BY_DEADLINE = True  # under --budget it keeps finished pieces and defers the rest
EVIDENCE = {
    "training_ranks": "ranks",
    "training_real": "ranks",
    "training_loss": "measured@training_info",
    "training_maxseq": "measured@training_info",
}
DISTRIBUTED = True  # under torchrun every rank runs it: the real-rank runs need all of them

TINY_LONG_MIX = pd.DataFrame(
    [("image", 32, 32, 1, 1, 0.1), ("video", 128, 128, 9, 17, 0.9)],
    columns=["kind", "height", "width", "frames_min", "frames_max", "share"],
)

# the cpu profile (tiny model): for tests
CPU_PROFILE = dict(
    model="tiny",
    layers=None,
    dtype="fp32",
    mix="tiny",
    long_mix=TINY_LONG_MIX,
    ranks=16,
    steps=3,
    long_steps=2,
    tuned_steps=2,
    global8_steps=2,
    m_mem_factor=2,
    loss_steps=12,
    loss_seeds=2,  # C15's loss runs, each seed another draw (a t-interval across them)
    loss_max_S=80,
    loss_m_mem=160,
    maxseq_probes=(),
    maxseq_ref=0,
    frame_tokens=16,
    corpus=4000,
    real_steps_max=8,
)

QUICK_PROFILE = dict(
    model="wan-1.3b",
    layers=1,
    checkpointing=True,
    dtype="bf16",
    mix="default",
    long_mix="long-video",
    ranks=16,
    steps=4,  # validation of the trace simulation (C4-C9 primary); 30-block sweep takes ~150 s
    long_steps=2,
    tuned_steps=3,  # C10's baseline: equal-token at the M_tok tuned for balance
    steps8=3,  # C7's pair on 8-rank plans
    global_steps=3,
    m_mem_factor=2,
    loss_steps=40,
    loss_seeds=3,
    loss_max_S=7800,
    loss_m_mem=12_480,
    maxseq_probes=(15_600, 31_200, 48_360),
    maxseq_ref=48_360,
    frame_tokens=1560,
    corpus=20_000,
    time_budget_s=179,  # 150, + C10's tuned baseline's estimate: 3 steps x 16 ranks x 0.6 s
    real_steps_max=40,
    rank_batch_s_guess=0.6,
    maxseq_s_guess=5,  # C14 probes (not measured alone yet)
    loss_s_guess=10,  # one seed's C15 loss runs (~10 s); each seed is its own resumable part
)

PROFILES = {
    "cpu": CPU_PROFILE,
    # SUITE_TRAINING_DEVICE=cpu: the cpu profile cut down for the torchrun test (< 30 s on 2 cores)
    "cpu-test": dict(
        CPU_PROFILE,
        steps=2,
        long_steps=1,
        tuned_steps=1,
        steps8=1,
        global8_steps=0,
        loss_steps=4,
        loss_seeds=1,
        real_steps_max=4,
    ),
    "quick": QUICK_PROFILE,
    # 2 layers, more steps (the global run as many as the others), a longer loss run and C14 probe
    "full": dict(
        QUICK_PROFILE,
        layers=2,
        steps=10,
        long_steps=6,
        tuned_steps=6,
        steps8=10,
        global_steps=10,
        global8_steps=10,  # the 8-rank global run (C7's scale), after the long-video runs
        time_budget_s=1800,
        loss_steps=120,  # x 3 seeds: a t-interval across seeds, where 200 steps of one had none
        maxseq_probes=(15_600, 31_200, 48_360, 62_400),
        real_steps_max=120,
        rank_batch_s_guess=1.2,
        maxseq_s_guess=60,
        loss_s_guess=110,  # per seed
    ),
}


# ----------------------------------------------------------------------------- measuring (torch)
def _profile(ctx: RunContext) -> dict:
    name = "cpu" if ctx.device != "cuda" else ("full" if ctx.profile == "full" else "quick")
    if name == "cpu" and NEEDS == "cpu":  # SUITE_TRAINING_DEVICE=cpu (tests)
        name = "cpu-test"
    prof = dict(PROFILES[name], name=name)
    prof.update(ctx.options.get("training", {}))
    return prof


def memory_budget(cm, corpus: pd.DataFrame, prof: dict) -> float:
    """M_mem of the runs: m_mem_factor x the longest sample, capped by the cost model's M_mem
    where it has one, never below the longest sample."""
    m_mem = float(prof["m_mem_factor"] * corpus.tokens.max())
    if cm is not None and math.isfinite(getattr(cm, "m_mem", math.nan)):
        m_mem = min(m_mem, float(cm.m_mem))
    return max(m_mem, float(corpus.tokens.max()))


def _budgets(ctx: RunContext, corpus: pd.DataFrame, prof: dict):
    from suite.balance.buckets import bucket_table
    from suite.balance.simulator import tune_s_cross
    from suite.train.plan import Budgets

    cm, source = _cost_model(ctx)
    m_mem = memory_budget(cm, corpus, prof)
    if cm is None:
        p, s_cross, tuned_on = 2.0, float(np.median(corpus.tokens)), "median length"
    else:
        p = float(cm.p)
        step_model, tuned_on = _tuning_model(ctx, cm)
        s_cross, _ = tune_s_cross(bucket_table(corpus.tokens), step_model, m_mem, p=p)
    return Budgets(m_mem, m_mem * s_cross ** (p - 1), p, source), s_cross, tuned_on


def _tuning_model(ctx: RunContext, cm):
    """The step model s_cross is tuned on: the sweep's quadratic fit (costmodel_quadratic) where
    there is one, else the power law. The quadratic form predicts the emulated steps far better
    than the power law, which, tuned on, leaves dual's batch sizes almost equal-token's
    (lab/dual_gap.py shows the gap)."""
    from suite.experiments.costmodel import run_quadratic

    quad = run_quadratic(ctx.run)
    return (cm, "costmodel_fit") if quad is None else (quad, "costmodel_quadratic")


def _fused_available(device: str) -> str:
    """'' when patch_wan's fused AdaLN runs here (a tiny model's forward), else why not."""
    if device != "cuda":
        return "fused AdaLN needs CUDA"
    try:
        import torch

        from suite.model.wan import build_wan, step_inputs

        m = build_wan("tiny", device="cuda", adaln="fused")
        x = step_inputs(m, 1, 1, 32, 32, device="cuda")
        m(x["hidden_states"], x["timestep"], x["encoder_hidden_states"][:, :8], return_dict=False)
        torch.cuda.synchronize()
        return ""
    except Exception as e:  # the fused op may be missing or fail to compile
        return f"fused AdaLN unavailable: {e}"


def _real_ranks(ctx, prof, corpus, budgets):
    """Under torchrun (world size K > 1): every rank trains the default mix's policies for real.
    Returns (table or None, rank); rank 0 gets all ranks' rows; the process group is destroyed."""
    import torch.distributed as dist

    from suite.balance.registry import names
    from suite.rundir import atomic_write_text
    from suite.train.realranks import broadcast, init_group, real_runs

    # kept across invocations of a resumed run (--budget): every rank sees the same file and
    # skips the real runs together; removed with the emulated parts when the experiment ends
    saved = ctx.run.results / "training_parts" / f"real-{prof['name']}-w{ctx.world_size}.csv"
    if saved.exists():
        rank = int(os.environ.get("RANK", "0"))
        real = read_csv(saved) if rank == 0 else None
        if real is not None and "commit" in real:
            ctx.part_commits.update(real.commit.astype(str))
        return real, rank
    dev, rank, world = init_group(ctx.device, int(ctx.options.get("local_rank", 0)))
    try:
        from suite.train.validate import allreduce_busbw

        # the K-rank step prediction's all-reduce model uses the bandwidth measured here
        busbw = allreduce_busbw(dev, 256 if dev.type == "cuda" else 4)["busbw_gbps"]
        budgets = broadcast(budgets if rank == 0 else None)  # rank 0's budgets on every rank
        R = prof["ranks"]
        steps = (
            min(prof["steps"] * R // world, prof["real_steps_max"])
            if R % world == 0
            else prof["steps"]
        )
        # the global policy's planner cost model, rank 0's (None: b * S^p, suite.train.plan)
        cost = broadcast(_cost_model(ctx)[0] if rank == 0 else None)
        real = real_runs(
            lambda d: _new_model(prof, "wan", d, ctx.seed),
            corpus,
            budgets,
            names(real_runs=True),  # the registry's rows trained on real ranks
            steps=steps,
            seed=ctx.seed,
            device=dev,
            log=ctx.log,
            cost=cost,
        )
    finally:
        dist.destroy_process_group()
    if rank == 0 and real is not None:
        from suite.env import commit_label

        real["busbw_gbps"], real["commit"] = busbw, commit_label()
        saved.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(saved, real.to_csv(index=False))
    return real, rank


def run(ctx: RunContext) -> dict[str, pd.DataFrame]:
    import torch

    from suite.train.data import load_corpus

    prof = _profile(ctx)
    busbw = float(ctx.options.get("busbw_gbps", 350.0))
    threads = torch.get_num_threads()
    if ctx.device != "cuda":
        torch.set_num_threads(1)
    real = None
    try:
        corpus = load_corpus(prof["corpus"], prof["mix"], ctx.seed)
        budgets, s_cross, tuned_on = _budgets(ctx, corpus, prof)
        # the long-video runs (C9) tune their own s_cross on their own mix, as a user tunes per
        # dataset: the default mix's s_cross can hold the longest videos to one sample per rank,
        # which costs the long mix throughput (lab/dual_gap.py --mix long-video measures it)
        long_corpus = load_corpus(prof["corpus"], prof["long_mix"], ctx.seed)
        long_budgets, long_s_cross, _ = _budgets(ctx, long_corpus, prof)
        if ctx.world_size > 1:
            real, rank = _real_ranks(ctx, prof, corpus, budgets)
            if rank != 0:
                return {}  # rank 0 writes; it goes on alone with the one-GPU emulation
        fused_reason = _fused_available(ctx.device)
        mix_budgets = {"default": budgets, "long": long_budgets}
        ranks, runs, parts, micro = _emulated_runs(ctx, prof, mix_budgets, fused_reason, busbw)
        # skip_maxseq / skip_loss (options["training"]): keep those tables from an earlier run
        maxseq = loss = None
        if not prof.get("skip_maxseq"):
            maxseq = parts.table(
                "c14-maxseq",
                0,
                prof.get("maxseq_s_guess", 0.0),
                lambda: _maxseq(ctx, prof, fused_reason),
            )
        if not prof.get("skip_loss"):  # one part per seed: a resumed run keeps finished seeds
            seeds = [
                parts.table(
                    f"c15-loss-seed{seed}",
                    prof["loss_steps"],
                    prof.get("loss_s_guess", 0.0),
                    lambda seed=seed: _loss_runs(ctx, prof, budgets, fused_reason, seed),
                )
                for seed in range(ctx.seed, ctx.seed + prof["loss_seeds"])
            ]
            if all(t is not None for t in seeds):  # else deferred: raised just below
                loss = pd.concat(seeds, ignore_index=True)
        parts.raise_if_deferred()  # what did not fit this invocation (--budget) is left
    finally:
        torch.set_num_threads(threads)
    cap = torch.cuda.get_device_properties(0).total_memory if ctx.device == "cuda" else math.nan
    info = pd.DataFrame(
        [
            {
                "profile": prof["name"],
                "model": prof["model"],
                "layers": int(ranks.layers.iloc[0]),
                "checkpointing": bool(prof.get("checkpointing", False)),
                "dim": int(ranks.dim.iloc[0]),
                "dtype": prof["dtype"],
                "ranks": prof["ranks"],
                "device": torch.cuda.get_device_name(0) if ctx.device == "cuda" else "cpu",
                "capacity_bytes": cap,
                "m_mem": budgets.m_mem,
                "m_comp": budgets.m_comp,
                "m_tok_tuned": tuned_budgets(budgets, corpus).m_mem,  # C10's baseline's M_tok
                "p": budgets.p,
                "s_cross": s_cross,
                "s_cross_tuned_on": tuned_on,
                "s_cross_long": long_s_cross,  # the long-video mix's (same M_mem and p)
                "m_comp_long": long_budgets.m_comp,
                "budget_source": budgets.source,
                "m_mem_cap": prof["m_mem_factor"] * float(corpus.tokens.max()),
                "busbw_gbps": busbw,
                "maxseq_ref": prof["maxseq_ref"],
                "fused": fused_reason or "ok",
                "steps": prof["steps"],
                "long_steps": prof["long_steps"],
                "real_world": ctx.world_size if real is not None else 1,
                "real_steps": int(real["step"].max()) + 1 if real is not None else 0,
            }
        ]
    )
    parts.clear()  # complete: the tables below replace the parts
    out = {
        "training_ranks": ranks,
        "training_micro": micro,
        "training_runs": runs,
        "training_info": info,
        "training_maxseq": maxseq,
        "training_loss": loss,
        "training_real": real,
    }
    return {k: v for k, v in out.items() if v is not None}


def summarize(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The emulated metrics (summary) plus the real-rank ones (realmetrics); pure: pandas only,
    no torch."""
    from suite.experiments.training.realmetrics import real_metrics
    from suite.experiments.training.summary import summarize as summarize_emulated
    from suite.metrics import METRIC_COLUMNS, metric_rows

    out = summarize_emulated(tables)
    extra = real_metrics(tables)
    if not extra:
        return out
    both = pd.concat([out.reindex(columns=METRIC_COLUMNS), metric_rows(extra)], ignore_index=True)
    both["value"] = both["value"].astype(float)
    return both
