"""The reference trainer: a Wan 2.1-style DiT on torch.distributed, one batch plan per policy.

Reads top to bottom: arguments -> distributed setup -> data plan -> model (+ DDP or FSDP2) ->
the loop. Each step on each rank:
    data      build this rank's batch of the plan (one bucket, deterministic tensors per sample)
    compute   forward + backward (flow-matching loss, bf16 autocast), timed with CUDA events
    collective  gradient average across ranks; collective_wait_s runs from this rank's compute end
              to the collective's end, so it holds the wait for the slowest rank plus the transfer
    optimizer AdamW step
and one JSONL line per rank and step goes to OUT/rank{r}.jsonl (schema: instrument.LOG_FIELDS).

DDP: the model is wrapped in DistributedDataParallel (parameter broadcast, the standard API), the
backward runs under no_sync() and the gradients are then averaged by all_reduce over flat buckets,
so compute and collective are measured apart (the paper's step = compute + collective + optimizer).
FSDP2 (--fsdp): fully_shard per block and at the root; its collectives overlap forward/backward,
so they sit inside compute_s and collective_wait_s is the wait for outstanding reduce-scatters.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from suite.model import WanDiT, flow_matching_loss, get_config
from suite.train.data import batch_columns, load_corpus, make_batch
from suite.train.instrument import JsonlLog, PhaseTimer, optimizer_step, peak_bytes, reset_peak
from suite.train.plan import budgets_for, make_plan

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}
BUCKET_BYTES = 25 * 2**20


@dataclass
class TrainArgs:
    model: str = "tiny"
    layers: int | None = None
    policy: str = "equal-token"
    steps: int = 10
    out: str = "runs/train"
    adaln: str = "wan"
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
    text_len: int | None = None
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


def build_model(args: TrainArgs, device: torch.device) -> WanDiT:
    overrides = {"text_len": args.text_len} if args.text_len else {}
    cfg = get_config(args.model, args.layers, **overrides)
    torch.manual_seed(args.seed)  # same initial weights on every rank (DDP also broadcasts)
    return WanDiT(cfg, adaln=args.adaln, checkpointing=args.checkpointing).to(device)


def noise_generator(device: torch.device, seed: int, step: int, rank: int) -> torch.Generator:
    """Timesteps and noise of (step, rank): the emulator's virtual rank r draws the same."""
    g = torch.Generator(device=device)
    g.manual_seed((seed * 7_919 + step) * 104_729 + rank + 1)
    return g


def forward_backward(model, x0, ctx, gen, dtype: str, scale: float = 1.0) -> float:
    """One batch's flow-matching loss forward and backward (gradients accumulate), returns the loss."""
    amp = DTYPES[dtype]
    with torch.autocast(x0.device.type, dtype=amp or torch.float32, enabled=amp is not None):
        loss = flow_matching_loss(model, x0, ctx, generator=gen)
    (loss * scale).backward()
    return loss.detach()


def average_gradients(params: list[torch.Tensor], world: int) -> None:
    """Average .grad across ranks with all_reduce(SUM) over flat buckets of ~25 MB, then / world."""
    grads = [p.grad for p in params if p.grad is not None]
    bucket, size = [], 0
    for g in grads + [None]:
        if g is not None:
            bucket.append(g)
            size += g.numel() * g.element_size()
        if bucket and (g is None or size >= BUCKET_BYTES):
            flat = _flatten_dense_tensors(bucket)
            dist.all_reduce(flat)
            flat /= world
            for t, s in zip(bucket, _unflatten_dense_tensors(flat, bucket)):
                t.copy_(s)
            bucket, size = [], 0


def _global_step(args, d: Dist, wrapped, params, opt, corpus, st, step: int, cfg) -> dict:
    """One step of the global policy on this rank (see suite.train.globalstep): this rank's
    micro-batches with gradient accumulation, loss weights tokens / global tokens, gradients summed
    (not averaged) across ranks."""
    import contextlib

    from suite.train import globalstep as gs

    t0 = time.perf_counter()
    mbs = st.ranks[d.rank]
    batches = gs.rank_batches(
        corpus, mbs, text_len=cfg.text_len, text_dim=cfg.text_dim, seed=args.seed, device=d.device
    )
    data_s = time.perf_counter() - t0
    reset_peak(d.device)
    timer = PhaseTimer(d.device)
    timer.mark("start")
    sync = wrapped.no_sync() if d.initialized else contextlib.nullcontext()
    with sync:
        info = gs.rank_backward(
            wrapped,
            batches,
            seed=args.seed,
            step=step,
            global_tokens=st.global_tokens,
            dtype=args.dtype,
        )
    timer.mark("compute")
    if d.initialized:
        gs.ensure_grads(params)
        average_gradients(params, 1)  # all_reduce SUM: the loss weights already normalise
    timer.mark("collective")
    optimizer_step(opt, timer)
    peak, reserved = peak_bytes(d.device)
    return {
        "step": step,
        "rank": d.rank,
        "world": d.world,
        "policy": args.policy,
        "adaln": args.adaln,
        "model": cfg.name,
        "layers": cfg.num_layers,
        "dim": cfg.dim,
        "emulated": False,
        **gs.log_fields(info, mbs, corpus),
        "loss": info["loss"],
        "data_s": data_s,
        "global_tokens": st.global_tokens,
        "compute_s": timer.seconds("start", "compute"),
        "collective_wait_s": timer.seconds("compute", "collective"),
        "optimizer_s": timer.seconds("collective", "optimizer"),
        "step_s": timer.seconds("start", "optimizer"),
        "peak_mem_bytes": peak,
        "peak_reserved_bytes": reserved,
    }


def train(args: TrainArgs) -> Path:
    """Run the trainer; returns the folder holding rank*.jsonl."""
    d = setup_distributed(args.device)
    out = Path(args.out)
    try:
        model = build_model(args, d.device)
        cfg = model.cfg
        corpus = load_corpus(args.corpus_size, args.mix, args.seed, args.manifest)
        budgets = budgets_for(
            corpus, cost_json=args.cost, m_mem=args.m_mem, m_comp=args.m_comp, p=args.p
        )
        if args.policy == "global":
            from suite.train import globalstep as gs

            if args.fsdp:
                raise ValueError(
                    "--policy global runs different numbers of micro-batches per rank; "
                    "FSDP2's per-forward collectives need equal counts: use DDP"
                )
            cost = gs.planner_cost(args.cost, budgets.p)
            plan = gs.global_plan(corpus, cost, budgets.m_mem, d.world, args.steps, args.seed)
        else:
            plan = make_plan(corpus, budgets.policy(args.policy), d.world, args.steps, args.seed)
        if d.rank == 0:
            from suite.rundir import write_json

            write_json(
                out / "config.json", {**asdict(args), "world": d.world, "budgets": asdict(budgets)}
            )
        if args.fsdp:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            if not d.initialized:
                raise RuntimeError("--fsdp needs a torchrun launch (a process group)")
            # fully_shard's default mesh is CUDA whenever a GPU exists, whatever --device says
            mesh = init_device_mesh(d.device.type, (d.world,))
            for block in model.blocks:
                fully_shard(block, mesh=mesh)
            fully_shard(model, mesh=mesh)
            wrapped = model
        elif d.initialized:
            ids = [d.device.index] if d.device.type == "cuda" else None
            wrapped = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
        else:
            wrapped = model
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
        log = JsonlLog(out / f"rank{d.rank}.jsonl")
        for step in range(args.steps):
            if args.policy == "global":
                log.write(
                    _global_step(args, d, wrapped, params, opt, corpus, plan[step], step, cfg)
                )
                continue
            t0 = time.perf_counter()
            idx = plan[step][d.rank]
            x0, ctx, info = make_batch(
                corpus,
                idx,
                text_len=cfg.text_len,
                text_dim=cfg.text_dim,
                seed=args.seed,
                device=d.device,
            )
            data_s = time.perf_counter() - t0
            reset_peak(d.device)
            timer = PhaseTimer(d.device)
            timer.mark("start")
            gen = noise_generator(d.device, args.seed, step, d.rank)
            if d.initialized and not args.fsdp:
                with wrapped.no_sync():
                    loss = forward_backward(wrapped, x0, ctx, gen, args.dtype)
                timer.mark("compute")
                average_gradients(params, d.world)
            else:
                loss = forward_backward(wrapped, x0, ctx, gen, args.dtype)
                timer.mark("compute")
                if d.initialized and d.device.type == "cuda":
                    torch.cuda.current_stream().synchronize()  # outstanding FSDP reduce-scatters
            timer.mark("collective")
            optimizer_step(opt, timer)
            peak, reserved = peak_bytes(d.device)
            log.write(
                {
                    "step": step,
                    "rank": d.rank,
                    "world": d.world,
                    "policy": args.policy,
                    "adaln": args.adaln,
                    "model": cfg.name,
                    "layers": cfg.num_layers,
                    "dim": cfg.dim,
                    "emulated": False,
                    **batch_columns(info),
                    "loss": float(loss),
                    "data_s": data_s,
                    "compute_s": timer.seconds("start", "compute"),
                    "collective_wait_s": timer.seconds("compute", "collective"),
                    "optimizer_s": timer.seconds("collective", "optimizer"),
                    "step_s": timer.seconds("start", "optimizer"),
                    "peak_mem_bytes": peak,
                    "peak_reserved_bytes": reserved,
                }
            )
        log.close()
        if d.initialized:
            dist.barrier()  # every rank's log is complete before rank 0 aggregates
    finally:
        if d.initialized:
            dist.destroy_process_group()
    return out
