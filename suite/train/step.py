"""The one training step: the model + optimizer factory, one forward + backward, and one step of
a Plan, the same code on a torchrun rank, in the one-GPU emulator, in the shape sweep
(suite.train.stepfn), the e2e benchmark and warm-up.

    model, opt = new_model("tiny", dtype="fp32")                   # build_wan + AdamW
    loss = forward_backward(model, batch, weight)                  # the only backward of suite/
    rec = train_step(model, opt, plan, step, corpus, ranks=[rank], seed=0, reduce=all_reduce_sum)

`forward_backward` is the flow-matching loss training uses (suite.model.wan.flow_matching_loss)
times the micro-batch's weight, backward, so gradients accumulate. `train_step` runs, for each
rank in `ranks` (this process's one rank under torchrun; every rank 0..world-1 in the emulator),
its micro-batches of the plan one after another through `forward_backward` (a packed plan's
varlen pack as its one-length groups: rank_batches). Each rank is timed
on its own (CUDA events on a GPU, perf_counter on CPU: `PhaseTimer`) with its peak memory; its data
(suite.train.data.corpus_batch) is built before its timer starts. Then `reduce` (the real ranks'
gradient all_reduce SUM, suite.train.distributed; None in the emulator, where accumulating every
virtual rank's weighted gradients already is the sum) and the optimizer step, each timed. A
step's weights sum to 1 over all ranks, so SUM, never a division by the world size, gives the
data-parallel gradient, whatever the split.

Noise per sample comes from (seed, sample index, epoch), epoch = the sample's earlier appearances
in the plan: policies train a sample with the same noise. The record's rows keep the training log
schema (suite.train.instrument.LOG_FIELDS); `real_rows` and the emulator's `compose_steps`
(suite.train.emulate) fill the step columns.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from suite.balance.plan import Plan
from suite.model.wan import Batch, build_wan, describe, flow_matching_loss
from suite.train.data import corpus_batch
from suite.train.instrument import PhaseTimer, optimizer_step, peak_bytes, reset_peak


def new_model(
    name: str,
    *,
    layers: int | None = None,
    dtype: str | torch.dtype = "bf16",
    device: str | torch.device = "cpu",
    checkpointing: bool = False,
    seed: int = 0,
    adaln: str = "wan",
    text_len: int | None = None,
    lr: float = 1e-4,
    shard=None,
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """(model, AdamW) of every training run and sweep: suite.model.wan.build_wan(name, ...) (the
    same seed, the same initial weights) and AdamW(lr, no weight decay) on its parameters.
    `shard(model)` (FSDP2, suite.train.distributed.fsdp_shard) runs in between: it replaces the
    parameters the optimizer must hold."""
    model = build_wan(
        name, layers=layers, dtype=dtype, device=device, checkpointing=checkpointing, seed=seed,
        adaln=adaln, text_len=text_len,
    )  # fmt: skip
    if shard is not None:
        model = shard(model)
    return model, torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)


def forward_backward(model: torch.nn.Module, batch: Batch, weight: float = 1.0) -> torch.Tensor:
    """The one forward + backward: the flow-matching loss of `batch` times its loss weight,
    backward into the parameters' .grad (accumulating). Returns the detached, unweighted loss
    (no host sync)."""
    loss = flow_matching_loss(model, batch)
    (loss * weight).backward()
    return loss.detach()


@dataclass
class StepRecord:
    step: int
    ranks: list[dict]  # one row per rank of `ranks`: B, S, tokens, ..., compute_s, peak memory
    micro: list[dict] = field(default_factory=list)  # per micro-batch: rank, micro, B, S, compute_s
    collective_s: float = 0.0  # the measured reduce (0 without one)
    optimizer_s: float = 0.0


@dataclass(frozen=True)
class _MicroBatch:
    """One micro-batch ready to run: its plan entry and tensors."""

    indices: np.ndarray
    weight: float
    batch: Batch


def rank_batches(
    plan: Plan, step: int, rank: int, corpus, seen, info, seed, device
) -> list[_MicroBatch]:
    """Rank `rank`'s micro-batches at `step` as tensors; noise by (seed, sample, epoch), the
    epoch of sample i being seen[i] (how many earlier steps of the plan trained it). A varlen
    pack of mixed lengths (a packed plan) runs as its one-length groups, longest first, each
    weighted by its share of the pack's tokens: the pack's token-weighted loss, hence the same
    gradient, without varlen attention (each group is a dense batch; its time is not a varlen
    kernel's)."""
    tokens = corpus.tokens.to_numpy()
    out = []
    for i in np.flatnonzero((plan.mb_step == step) & (plan.mb_rank == rank)):
        pack = plan.samples[plan.mb_start[i] : plan.mb_start[i + 1]]
        S = tokens[pack]
        for s in sorted(set(S.tolist()), reverse=True):
            idx = pack[S == s]
            w = float(plan.mb_weight[i]) * s * len(idx) / S.sum()
            b = corpus_batch(corpus, idx, info, seen[idx], seed=seed, device=device)
            out.append(_MicroBatch(idx, w, b))
    return out


def epochs_before(plan: Plan, step: int, n_samples: int) -> np.ndarray:
    """seen[i]: how many steps before `step` trained sample i (a sample appears once per step)."""
    lo = int(np.searchsorted(plan.mb_step, step))
    return np.bincount(plan.samples[: plan.mb_start[lo]], minlength=n_samples)


def train_step(
    model,
    optimizer,
    plan: Plan,
    step: int,
    corpus: pd.DataFrame,
    *,
    ranks,
    seed: int,
    reduce=None,
) -> StepRecord:
    """Run `ranks`' micro-batches of plan step `step` on `model` (a DDP wrapper runs them under
    no_sync), then reduce(params) and the optimizer step; returns the timed StepRecord."""
    info = describe(model)
    params = [p for p in model.parameters() if p.requires_grad]
    device = params[0].device
    seen = epochs_before(plan, step, len(corpus))
    no_sync = model.no_sync if hasattr(model, "no_sync") else contextlib.nullcontext
    pending = []  # per rank: what its rows need; timings and losses read after one sync
    for r in ranks:
        t0 = time.perf_counter()
        batches = rank_batches(plan, step, r, corpus, seen, info, seed, device)
        data_s = time.perf_counter() - t0
        reset_peak(device)
        timer = PhaseTimer(device)
        timer.mark("start")
        losses = []
        with no_sync():
            for m, mb in enumerate(batches):
                losses.append(forward_backward(model, mb.batch, mb.weight))
                timer.mark(f"mb{m}")
        timer.mark("compute")
        shapes = [(len(mb.indices), mb.batch.S, mb.weight) for mb in batches]  # tensors go
        pending.append((r, shapes, timer, losses, data_s, *peak_bytes(device)))
    timer = PhaseTimer(device)
    timer.mark("start")
    if reduce is not None:
        reduce(params)
    timer.mark("collective")
    optimizer_step(optimizer, timer)
    meta = {"world": plan.world, "policy": plan.policy, "adaln": info.adaln, "model": info.model,
            "layers": info.layers, "dim": info.dim}  # fmt: skip
    global_tokens = int(corpus.tokens.to_numpy()[plan.step_samples(step)].sum())
    rows, micros = [], []
    for r, shapes, t, losses, data_s, peak, reserved in pending:
        marks = ["start"] + [f"mb{m}" for m in range(len(shapes))]
        loss = [float(v) for v in losses]
        for m, (B, S, w) in enumerate(shapes):
            secs = t.seconds(marks[m], marks[m + 1])
            micros.append({"step": step, "rank": r, "micro": m, "B": B, "S": S, "weight": w,
                           "loss": loss[m], "compute_s": secs})  # fmt: skip
        n, tok = sum(B for B, _, _ in shapes), [B * S for B, S, _ in shapes]
        rows.append(
            {
                "step": step,
                "rank": r,
                **meta,
                "B": n,
                "S": int(round(sum(tok) / n)) if n else 0,  # its one length, or a mixed rank's mean
                "tokens": sum(tok),
                "samples": n,
                "bucket": max((S for _, S, _ in shapes), default=0),
                "micro_batches": len(shapes),
                "sum_s2": float(sum(B * float(S) ** 2 for B, S, _ in shapes)),
                "global_tokens": global_tokens,
                # token mean over its micro-batches (nan: a rank without samples this step)
                "loss": sum(v * k for v, k in zip(loss, tok)) / sum(tok) if n else math.nan,
                "data_s": data_s,
                "compute_s": t.seconds("start", "compute"),
                "peak_mem_bytes": peak,
                "peak_reserved_bytes": reserved,
            }
        )
    return StepRecord(
        step, rows, micros, timer.seconds("start", "collective"),
        timer.seconds("collective", "optimizer"),
    )  # fmt: skip


def real_rows(rec: StepRecord) -> list[dict]:
    """A real rank's rows: collective_wait_s is the measured reduce from this rank's compute end
    (so it holds the wait for the slowest rank), step_s the sum of the phases."""
    return [
        {
            **row,
            "emulated": False,
            "collective_wait_s": rec.collective_s,
            "optimizer_s": rec.optimizer_s,
            "step_s": row["compute_s"] + rec.collective_s + rec.optimizer_s,
        }
        for row in rec.ranks
    ]
