"""Real data-parallel ranks inside `python -m suite reproduce` under torchrun (K > 1 processes).

The training experiment (suite.experiments.training) calls `real_runs` on every rank: one
process group (suite.train.distributed: NCCL on GPUs, gloo on CPU, torchrun's env:// rendezvous),
then per policy a fresh model with the same initial weights, wrapped in DistributedDataParallel,
trained on its own K-rank
Plan (`training_plan(corpus, policy, K, steps)`; for a bucket policy step k trains global batches
k*K .. k*K + K - 1, the 16-rank plan's batches regrouped). Each step on each rank is
suite.train.step.train_step, as in suite.train.trainer (compute under no_sync, then the gradient
all_reduce SUM, then AdamW), and rank 0
gathers every rank's rows with `all_gather_object`; the process group is then destroyed, so rank 0
can go on alone with the emulated runs while the other ranks leave. The C7/C8 metrics of the
gathered rows (table training_real) are the training experiment's (its realmetrics module).
"""

from __future__ import annotations

import pandas as pd

GROUP_TIMEOUT_S = 3600.0  # rank 0 runs the earlier experiments alone while the others wait


def init_group(device_type: str, local_rank: int):
    """(device, rank, world) of the experiment's one process group (suite.train.distributed).
    Timeout 1 h: rank 0 runs the earlier experiments alone (quick: ~1.5 min, full: ~8 min) while
    the others already wait here. If rank 0 fails in a real run it records the error and exits
    non-zero at the end, and torchrun then stops the ranks still waiting in a collective."""
    from suite.train.distributed import init_distributed

    d = init_distributed(device_type, local_rank=local_rank, timeout_s=GROUP_TIMEOUT_S)
    return d.device, d.rank, d.world


def broadcast(obj):
    """rank 0's object on every rank."""
    from suite.train.distributed import broadcast

    return broadcast(obj)


def real_runs(
    new_model,
    corpus: pd.DataFrame,
    budgets,
    policies,
    *,
    steps: int,
    seed: int,
    device,
    mix: str = "default",
    log=print,
    cost=None,
) -> pd.DataFrame | None:
    """Train each policy with the process group's ranks; rank 0 gets all ranks' rows, others None.

    new_model(device) -> (model, optimizer) must give the same initial weights on every rank;
    `cost` is the global policy's planner cost model (suite.balance.registry.PolicyInputs)."""
    import torch
    import torch.distributed as dist

    from suite.balance.registry import PolicyInputs, make_policy
    from suite.train.distributed import all_reduce_sum, ddp
    from suite.train.plan import training_plan
    from suite.train.step import real_rows, train_step

    rank, world = dist.get_rank(), dist.get_world_size()
    backend = dist.get_backend()
    rows = []
    seen: set = set()  # shapes warmed in this process (by an earlier policy's run)
    for policy in policies:
        name = f"{mix}/{policy}/wan"
        inputs = PolicyInputs.from_budgets(budgets, corpus.tokens, cost)
        plan = training_plan(corpus, make_policy(policy, inputs), world, steps, seed)
        model, opt = new_model(device)
        _warm_rank(model, opt, corpus, plan, rank, seed, seen)
        wrapped = ddp(model, device)
        if rank == 0:
            log(f"training: {name}, {world} real ranks ({backend}) x {steps} steps")
        dist.barrier()
        for step in range(steps):
            rec = train_step(
                wrapped, opt, plan, step, corpus, ranks=[rank], seed=seed, reduce=all_reduce_sum
            )
            rows += [{"run": name, "mix": mix, "backend": backend, **r} for r in real_rows(rec)]
        del wrapped, model, opt
        if device.type == "cuda":
            torch.cuda.empty_cache()
    gathered: list = [None] * world
    dist.all_gather_object(gathered, rows)
    if rank != 0:
        return None
    out = pd.DataFrame([r for part in gathered for r in part])
    return out.sort_values(["run", "step", "rank"]).reset_index(drop=True)


def _warm_rank(model, opt, corpus, plan, rank, seed, seen: set) -> None:
    """This rank's heaviest batches and every shape of its steps not in `seen` (warmed by an
    earlier policy's run of this process), on the bare model before DDP wraps it, as the emulated
    ranks are warmed (suite.train.warmup); no optimizer step, gradients cleared."""
    from suite.train.warmup import model_batches, warm, warm_batches

    batches = warm_batches(corpus, model_batches(plan, rank=rank), seen=seen)
    warm(model, corpus, batches, seed=seed)
    opt.zero_grad(set_to_none=True)
