"""The reference trainer: diffusers' Wan 2.1 transformer on torch.distributed, one Plan per policy.

Reads top to bottom: arguments -> distributed setup -> model, corpus, budgets, plan (`run_setup`,
shared with the emulator) -> DDP or FSDP2 -> the loop of suite.train.step.train_step. Each step
on each rank:
    data      this rank's micro-batches of the plan (deterministic tensors and noise per sample)
    compute   forward + backward of each (flow-matching loss x the plan's weight), CUDA events
    collective  gradient all_reduce SUM (the weights sum to 1 over the step's ranks);
              collective_wait_s runs from this rank's compute end to the collective's end, so it
              holds the wait for the slowest rank plus the transfer
    optimizer AdamW step
and one JSONL line per rank and step goes to OUT/rank{r}.jsonl (schema: instrument.LOG_FIELDS).

DDP: the model is wrapped in DistributedDataParallel (parameter broadcast, the standard API), the
backward runs under no_sync() and the gradients are then summed by all_reduce over flat buckets,
so compute and collective are measured apart (the paper's step = compute + collective + optimizer).
FSDP2 (--fsdp): fully_shard per block of model.blocks, then the root; its reduce-scatter averages
over ranks, so the reduce phase multiplies the gradient shards by the world size (a SUM, as the
plan's weights ask; gloo has no pre-multiplied reduce for a divide factor of 1); its collectives
overlap forward/backward, so they sit inside compute_s and collective_wait_s is the wait for
outstanding reduce-scatters. bf16 under FSDP2 is Wan's own FSDP recipe (fp32 sharded parameters,
bf16 compute, fp32 reduce, only the root casts its inputs: `mixed_precision`; FSDP2 needs one
dtype per sharded group, and diffusers keeps some of a block's parameters fp32); every rank must
run the same number of micro-batches per step (FSDP2's per-forward collectives), so not the
global policy.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from suite.balance.registry import PolicyInputs, make_policy
from suite.model.wan import DTYPES, build_wan
from suite.train.data import load_corpus
from suite.train.instrument import JsonlLog
from suite.train.plan import budgets_for, training_plan
from suite.train.step import all_reduce_sum, real_rows, train_step


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


@dataclass
class Dist:
    rank: int
    world: int
    device: torch.device
    initialized: bool


def setup_distributed(device_pref: str = "auto") -> Dist:
    """All distributed setup in one place: torchrun's env:// rendezvous, NCCL on GPUs, gloo on CPU."""
    use_cuda = torch.cuda.is_available() if device_pref == "auto" else device_pref == "cuda"
    if use_cuda and not torch.cuda.is_available():
        raise RuntimeError("--device cuda asked for, but torch sees no CUDA device")
    if "RANK" not in os.environ:
        return Dist(0, 1, torch.device("cuda" if use_cuda else "cpu"), False)
    local = int(os.environ.get("LOCAL_RANK", 0))
    if use_cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if use_cuda else "gloo")
    device = torch.device("cuda", local) if use_cuda else torch.device("cpu")
    return Dist(dist.get_rank(), dist.get_world_size(), device, True)


def build_model(args: TrainArgs, device: torch.device, fsdp: bool = False):
    """The run's model: same seed, same initial weights on every rank (DDP also broadcasts).
    Under FSDP2 the parameters stay fp32 (bf16 then comes from the mixed-precision policy)."""
    dtype = "fp32" if fsdp else args.dtype
    return build_wan(
        args.model, layers=args.layers, dtype=dtype, device=device, seed=args.seed,
        checkpointing=args.checkpointing, adaln=args.adaln, text_len=args.text_len,
    )  # fmt: skip


def planner_cost(cost_json: str | None):
    """The global policy's planner: the cost JSON's model, else None (the registry's default)."""
    if not cost_json:
        return None
    from suite.balance.costmodel import CostModel

    return CostModel.load(cost_json)


def run_setup(args: TrainArgs, device: torch.device, world: int, fsdp: bool = False):
    """(model, corpus, budgets, plan): what a real and an emulated run of `args` both start from."""
    model = build_model(args, device, fsdp)
    corpus = load_corpus(args.corpus_size, args.mix, args.seed, args.manifest)
    budgets = budgets_for(
        corpus, cost_json=args.cost, m_mem=args.m_mem, m_comp=args.m_comp, p=args.p
    )
    inputs = PolicyInputs.from_budgets(budgets, corpus.tokens, planner_cost(args.cost))
    policy = make_policy(args.policy, inputs)
    plan = training_plan(corpus, policy, world, args.steps, args.seed)
    return model, corpus, budgets, plan


def mixed_precision(dtype: str):
    """FSDP2's policies (blocks, root): `dtype` compute, fp32 reduce; only the root casts its
    inputs (FSDP1's default, Wan's recipe). The blocks take their inputs as the root makes them
    (hidden states and temb in `dtype`, RoPE tables fp32, as in diffusers' own bf16 forward), so a
    checkpointed block recomputes on the very inputs its forward saw: diffusers checkpoints each
    block from outside its FSDP hooks, and torch < 2.13 skips the hooks' input cast in that
    recompute (pytorch/pytorch#159359), which made bf16 RoPE tables fp32 on recompute."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    policy = dict(param_dtype=DTYPES[dtype], reduce_dtype=torch.float32)
    return (
        MixedPrecisionPolicy(**policy, cast_forward_inputs=False),
        MixedPrecisionPolicy(**policy, cast_forward_inputs=True),
    )


def shard(model, d: Dist, dtype: str):
    """FSDP2: fully_shard each block, then the root (`mixed_precision(dtype)`; fp32 shards)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    if not d.initialized:
        raise RuntimeError("--fsdp needs a torchrun launch (a process group)")
    # fully_shard's default mesh is CUDA whenever a GPU exists, whatever --device says
    mesh = init_device_mesh(d.device.type, (d.world,))
    block_mp, root_mp = mixed_precision(dtype)
    for block in model.blocks:
        fully_shard(block, mesh=mesh, mp_policy=block_mp)
    fully_shard(model, mesh=mesh, mp_policy=root_mp)
    return model


def fsdp_sum(world: int, cuda: bool):
    """The FSDP2 run's reduce phase: wait for outstanding reduce-scatters (CUDA), then undo their
    average (x world): the plan's weights already sum to 1 over the ranks."""

    def reduce(params):
        if cuda:
            torch.cuda.current_stream().synchronize()
        with torch.no_grad():
            for p in params:
                if p.grad is not None:
                    p.grad.mul_(world)

    return reduce


def _equal_micro_counts(plan) -> bool:
    counts = np.zeros((plan.steps, plan.world), np.int64)
    np.add.at(counts, (plan.mb_step, plan.mb_rank), 1)
    return bool((counts == counts[:, :1]).all())


def train(args: TrainArgs) -> Path:
    """Run the trainer; returns the folder holding rank*.jsonl."""
    d = setup_distributed(args.device)
    out = Path(args.out)
    try:
        model, corpus, budgets, plan = run_setup(args, d.device, d.world, args.fsdp)
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
        reduce = None
        if args.fsdp:
            wrapped = shard(model, d, args.dtype)
            reduce = fsdp_sum(d.world, d.device.type == "cuda")
        elif d.initialized:
            ids = [d.device.index] if d.device.type == "cuda" else None
            wrapped = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
            reduce = all_reduce_sum
        else:
            wrapped = model
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
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
