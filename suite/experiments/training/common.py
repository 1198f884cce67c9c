"""What every run of the training experiment (suite.experiments.training) starts from: the
cost model of the run's earlier tables, a fresh model with its optimizer (the same initial
weights for a given seed), and a policy's Plan (suite.balance.plan), which the emulator and the
real ranks run with suite.train.step.train_step."""

from __future__ import annotations

from suite.rundir import RunContext


def _cost_model(ctx: RunContext):
    from suite.balance.costmodel import fit_cost

    try:
        from suite.balance.fit_table import model_from_fit

        return model_from_fit(ctx.run.read_table("costmodel_fit")), "costmodel_fit"
    except (FileNotFoundError, ImportError, ValueError):
        pass
    try:
        sw = ctx.run.read_table("shapes_sweep")
        return fit_cost(sw.B, sw.S, sw.step_s, source="shapes_sweep"), "fit of shapes_sweep"
    except (FileNotFoundError, ValueError):
        return None, "none (p = 2)"


def _new_model(prof, adaln, device, seed):
    """diffusers' Wan transformer of the profile (config, blocks, dtype, checkpointing) and AdamW."""
    from suite.train.step import new_model

    return new_model(
        prof["model"], layers=prof["layers"], dtype=prof["dtype"], device=device, seed=seed,
        checkpointing=prof.get("checkpointing", False), adaln=adaln, text_len=prof.get("text_len"),
    )  # fmt: skip


def _plan(ctx: RunContext, corpus, policy: str, budgets, world: int, steps: int, seed=None):
    """The policy's Plan for `world` ranks (a policy that needs a cost model: the run's; the others
    plan on the budgets alone), drawn with `seed` (default: the run's)."""
    from suite.balance.registry import PolicyInputs, make_policy, trait
    from suite.train.plan import training_plan

    cost = _cost_model(ctx)[0] if trait(policy, "needs_cost_model") else None
    pol = make_policy(policy, PolicyInputs.from_budgets(budgets, corpus.tokens, cost))
    return training_plan(corpus, pol, world, steps, ctx.seed if seed is None else seed)
