"""What every run of the training experiment (suite/experiments/training.py) starts from: the
cost model of the run's earlier tables, a fresh model with its optimizer (the same initial
weights for a given seed), and a policy's batch plan with the emulator that runs it."""

from __future__ import annotations

from suite.rundir import RunContext


def _cost_model(ctx: RunContext):
    from suite.balance.costmodel import fit_cost

    try:
        from suite.experiments.costmodel import model_from_fit

        return model_from_fit(ctx.run.read_table("costmodel_fit")), "costmodel_fit"
    except (FileNotFoundError, ImportError, ValueError):
        pass
    try:
        sw = ctx.run.read_table("shapes_sweep")
        return fit_cost(sw.B, sw.S, sw.step_s, source="shapes_sweep"), "fit of shapes_sweep"
    except (FileNotFoundError, ValueError):
        return None, "none (p = 2)"


def _new_model(prof, adaln, device, seed):
    import torch

    from suite.model import WanDiT, get_config

    torch.manual_seed(seed)
    model = WanDiT(get_config(prof["model"], prof["layers"]), adaln=adaln).to(device)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)


def _plan(ctx: RunContext, corpus, policy: str, budgets, world: int, steps: int):
    """(plan, emulator): a bucket policy's plan[step][rank] batches run by `emulate`, or the global
    policy's per-step plans (its planner cost: the run's cost model, else p alone) run by
    `emulate_global`."""
    from suite.train.emulate import emulate, emulate_global

    if policy == "global":
        from suite.train.globalstep import global_plan, planner_cost

        cost = _cost_model(ctx)[0] or planner_cost(None, budgets.p)
        return global_plan(corpus, cost, budgets.m_mem, world, steps, ctx.seed), emulate_global
    from suite.train.plan import make_plan

    return make_plan(corpus, budgets.policy(policy), world, steps, ctx.seed), emulate
