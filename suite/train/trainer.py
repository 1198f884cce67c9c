"""The reference trainer: diffusers' Wan 2.1 transformer on torch.distributed, one Plan per policy.

Reads top to bottom: arguments -> distributed set-up (suite.train.distributed) -> model and
optimizer, corpus, budgets, plan (`run_setup`, shared with the emulator) -> DDP or FSDP2 -> the
loop of suite.train.step.train_step. Each step on each rank:
    data      this rank's micro-batches of the plan (deterministic tensors and noise per sample)
    compute   forward + backward of each (flow-matching loss x the plan's weight), CUDA events
    collective  gradient all_reduce SUM (the weights sum to 1 over the step's ranks);
              collective_wait_s runs from this rank's compute end to the collective's end, so it
              holds the wait for the slowest rank plus the transfer
    optimizer AdamW step
and one JSONL line per rank and step goes to OUT/rank{r}.jsonl (schema: instrument.LOG_FIELDS).
Under FSDP2 (--fsdp) the parameters are built fp32 (bf16 comes from its mixed-precision policy)
and every rank must run the same number of micro-batches per step, so not the global policy.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from suite.balance.registry import PolicyInputs, make_policy
from suite.train.data import load_corpus
from suite.train.distributed import data_parallel, fsdp_shard, init_distributed
from suite.train.instrument import JsonlLog
from suite.train.plan import budgets_for, training_plan
from suite.train.step import new_model, real_rows, train_step


@dataclass
class TrainArgs:
    model: str = "tiny"
    layers: int | None = None
    policy: str = "equal-token"  # a name of suite.balance.registry.POLICIES
    steps: int = 10
    out: str = "runs/train"
    adaln: str = "wan"  # or "fused" (suite.ops.diffusers.patch_wan)
    fsdp: bool = False
    emulate_ranks: int = 0  # > 0: one-process virtual-rank emulation (suite.train.emulate)
    mix: str = "default"
    manifest: str | None = None
    corpus_size: int = 20000
    cost: str | None = None  # cost JSON from `python -m suite fit-cost`
    m_mem: float | None = None
    m_comp: float | None = None
    p: float | None = None
    seed: int = 0
    lr: float = 1e-4
    dtype: str = "bf16"
    checkpointing: bool = False
    text_len: int | None = None  # default: the model's (512; 8 for tiny)
    device: str = "auto"
    collective_busbw_gbps: float = 350.0  # emulator's bandwidth model (see emulate.py)


def build_model(args: TrainArgs, device: torch.device, shard=None):
    """(model, AdamW) of the run: same seed, same initial weights on every rank (DDP also
    broadcasts). With `shard` (FSDP2) the parameters stay fp32 (bf16 then comes from the
    mixed-precision policy)."""
    return new_model(
        args.model, layers=args.layers, dtype="fp32" if shard else args.dtype, device=device,
        seed=args.seed, checkpointing=args.checkpointing, adaln=args.adaln,
        text_len=args.text_len, lr=args.lr, shard=shard,
    )  # fmt: skip


def planner_cost(cost_json: str | None):
    """The global policy's planner: the cost JSON's model, else None (the registry's default)."""
    if not cost_json:
        return None
    from suite.balance.costmodel import CostModel

    return CostModel.load(cost_json)


def run_setup(args: TrainArgs, device: torch.device, world: int, shard=None):
    """(model, optimizer, corpus, budgets, plan): what a real and an emulated run of `args` both
    start from (`shard`: FSDP2's, suite.train.distributed.fsdp_shard)."""
    model, opt = build_model(args, device, shard)
    corpus = load_corpus(args.corpus_size, args.mix, args.seed, args.manifest)
    budgets = budgets_for(
        corpus, cost_json=args.cost, m_mem=args.m_mem, m_comp=args.m_comp, p=args.p
    )
    inputs = PolicyInputs.from_budgets(budgets, corpus.tokens, planner_cost(args.cost))
    policy = make_policy(args.policy, inputs)
    plan = training_plan(corpus, policy, world, args.steps, args.seed)
    return model, opt, corpus, budgets, plan


def _equal_micro_counts(plan) -> bool:
    counts = np.zeros((plan.steps, plan.world), np.int64)
    np.add.at(counts, (plan.mb_step, plan.mb_rank), 1)
    return bool((counts == counts[:, :1]).all())


def train(args: TrainArgs) -> Path:
    """Run the trainer; returns the folder holding rank*.jsonl."""
    d = init_distributed(args.device)
    out = Path(args.out)
    try:
        shard = fsdp_shard(d, args.dtype) if args.fsdp else None
        model, opt, corpus, budgets, plan = run_setup(args, d.device, d.world, shard)
        if args.fsdp and not _equal_micro_counts(plan):
            raise ValueError(
                f"--policy {args.policy} gives ranks different numbers of micro-batches in a "
                "step; FSDP2's per-forward collectives need equal counts: use DDP"
            )
        if d.rank == 0:
            from suite.rundir import write_json

            write_json(
                out / "config.json", {**asdict(args), "world": d.world, "budgets": asdict(budgets)}
            )
        wrapped, reduce = data_parallel(model, d, args.fsdp)
        log = JsonlLog(out / f"rank{d.rank}.jsonl")
        for step in range(args.steps):
            rec = train_step(
                wrapped, opt, plan, step, corpus, ranks=[d.rank], seed=args.seed, reduce=reduce
            )
            for row in real_rows(rec):
                log.write(row)
        log.close()
        if d.initialized:
            dist.barrier()  # every rank's log is complete before rank 0 aggregates
    finally:
        if d.initialized:
            dist.destroy_process_group()
    return out
