"""What every run of the training experiment (suite/experiments/training.py) starts from: the
cost model of the run's earlier tables, and a fresh model with its optimizer (the same initial
weights for a given seed)."""

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
