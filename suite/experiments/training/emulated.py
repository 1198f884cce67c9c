"""The training experiment's one-GPU emulated runs (suite.experiments.training): every policy
and AdaLN path on the same virtual ranks, each after its own warm-up on a throwaway model; with
`reproduce --budget S` the finished runs are kept in results/training_parts/ and a run that would
end past the invocation's deadline is left to the next invocation (parts.Parts).

- runs (table training_runs): default mix under equal-token/wan, dual/wan and dual/fused (C17,
  C18), long-video mix under equal-token/wan and dual/wan (C9), C10's baseline
  default/equal-token-tuned/wan (equal-token at the M_tok tuned for balance, `tuned_budgets`; its
  own policy segment, so no reader of "equal-token" runs takes it), the default pair again with its
  own 8-rank plans (C7: `@8`), then default/global/wan when the time budget allows (the
  global policy, beyond the paper: per-step LPT over the 16 virtual ranks with the run's cost model, micro-batches
  of <= M_mem tokens, loss weighted by global tokens; after the paper's runs, so a tight budget
  drops it first); each run's rank rows go to training_ranks (one row per step and virtual rank),
  its micro-batches to training_micro (step, rank, micro, B, S, compute_s: the trace a simulation
  of the same plan is validated against).
"""

from __future__ import annotations

import dataclasses
import math
import time

import pandas as pd

from suite.experiments.training.common import _new_model, _plan
from suite.experiments.training.parts import Parts
from suite.experiments.training.peakmem import TUNED, tuned_token_budget


def tuned_budgets(budgets, corpus):
    """C10's baseline: equal-token's M_tok (the budgets' M_mem) tuned for balance on `corpus`,
    so that its longest sample's batch stays within M_comp (peakmem.tuned_token_budget)."""
    m_tok = tuned_token_budget(budgets.m_comp, budgets.p, float(corpus.tokens.max()))
    return dataclasses.replace(budgets, m_mem=m_tok)


# a run's policy segment -> (registry policy, its budgets from the mix's): the rest as named
RUN_POLICIES = {TUNED: ("equal-token", tuned_budgets)}


def _warm_batches(corpus, plan, seen: set) -> list:
    """What a run's warm-up runs (suite.train.warmup): its heaviest batches, and the shapes of its
    steps no earlier run of this invocation warmed (shape set-up is per process; in the quick
    profile 117 warm batches instead of the 182 that warming every plan in full took)."""
    from suite.train.warmup import model_batches, warm_batches

    return warm_batches(corpus, model_batches(plan), seen=seen)


def _warmup(prof, adaln, corpus, batches, device, seed) -> None:
    """Right before a run, on a throwaway model of its AdaLN path (kernel compilation, allocator
    peak, per-shape set-up), so a run that the budget skips costs no warm-up either."""
    from suite.train.warmup import warm

    model, _ = _new_model(prof, adaln, device, seed)
    warm(model, corpus, batches, seed=seed)
    del model


def _emulated_runs(ctx, prof, budgets, fused_reason, busbw):
    """budgets: one Budgets for every mix, or {mix: Budgets} (each mix's own tuned s_cross)."""
    import torch

    from suite.train.data import load_corpus
    from suite.train.emulate import collective_seconds, emulate, gradient_bytes

    dev = torch.device(ctx.device)
    R = prof["ranks"]
    if not isinstance(budgets, dict):
        budgets = {"default": budgets, "long": budgets}
    # (mix, policy, adaln, steps, ranks): the paper's runs first, then C10's tuned baseline, then
    # the 8-rank pair (C7) and the global policy (beyond the paper), also at 8 ranks where the
    # profile asks for it: a tight budget drops the later ones first
    specs = [
        ("default", "equal-token", "wan", prof["steps"], R),
        ("default", "dual", "wan", prof["steps"], R),
        ("default", "dual", "fused", prof["steps"], R),
        ("long", "equal-token", "wan", prof["long_steps"], R),
        ("long", "dual", "wan", prof["long_steps"], R),
    ]
    if prof.get("tuned_steps") and math.isfinite(budgets["default"].m_comp):
        specs.append(("default", TUNED, "wan", prof["tuned_steps"], R))
    if R > 8:  # C7: the pair on its own 8-rank plans (not halves of the 16-rank steps)
        s8 = prof.get("steps8", prof["steps"])
        specs += [("default", p, "wan", s8, 8) for p in ("equal-token", "dual") if s8]
    specs.append(("default", "global", "wan", prof.get("global_steps", prof["steps"]), R))
    if prof.get("global8_steps") and R > 8:
        specs.append(("default", "global", "wan", prof["global8_steps"], 8))
    corpora = {
        "default": load_corpus(prof["corpus"], prof["mix"], ctx.seed),
        "long": load_corpus(prof["corpus"], prof["long_mix"], ctx.seed),
    }
    runs, jobs = [], []
    for mix, policy, adaln, steps, world in specs:
        name = f"{mix}/{policy}/{adaln}" + ("" if world == R else f"@{world}")
        if adaln == "fused" and fused_reason:
            runs.append({"run": name, "status": f"skipped: {fused_reason}"})
            continue
        mix_budgets = budgets[mix]
        if policy in RUN_POLICIES:
            policy, of = RUN_POLICIES[policy]
            mix_budgets = of(mix_budgets, corpora[mix])
        plan = _plan(ctx, corpora[mix], policy, mix_budgets, world, steps)
        jobs.append((corpora[mix], plan, adaln, name, mix, steps))
    parts = Parts(ctx, prof)
    done = {name: parts.load(name, steps) for _, _, _, name, _, steps in jobs}
    # the time budget is spent in the runs' order, whichever invocation ran them: a run is skipped
    # when the runs before it (measured, or estimated where not run yet) and its own estimate pass
    # time_budget_s, so how a run is split into invocations (--budget) never changes which runs
    # it has; estimates at the measured seconds per rank-step, warm-ups included
    measured = [
        (parts.seconds_of(n, st), p.steps * p.world)
        for _, p, _, n, _, st in jobs
        if done[n] is not None
    ]
    meas_s, meas_work = sum(s for s, _ in measured), sum(w for _, w in measured)
    spent = 0.0  # seconds of the runs before this one, in the runs' order
    seen: set = set()  # shapes warmed in this invocation
    ranks, micros = [], []
    for corpus, plan, adaln, name, mix, steps in jobs:
        if done[name] is not None:  # finished in an earlier invocation (--budget)
            ranks.append(done[name])
            micros.append(parts.load(name + "-micro", steps))
            runs.append({"run": name, "status": "ok (resumed)"})
            spent += parts.seconds_of(name, steps)
            continue
        rate = meas_s / meas_work if meas_work else prof.get("rank_batch_s_guess", 0.0)
        est = rate * plan.steps * plan.world
        if spent + est > prof.get("time_budget_s", math.inf):
            runs.append(
                {
                    "run": name,
                    "status": f"skipped: time budget ({spent:.0f} s before it, "
                    f"~{est:.0f} s needed, time_budget_s = {prof['time_budget_s']})",
                }
            )
            continue
        spent += est
        if not parts.fits(f"the run {name}", est):
            continue  # left to the next invocation; later runs that fit go first
        t_run = time.perf_counter()
        _warmup(prof, adaln, corpus, _warm_batches(corpus, plan, seen), dev, ctx.seed)
        model, opt = _new_model(prof, adaln, dev, ctx.seed)
        gbytes = gradient_bytes(model)
        coll = collective_seconds(gbytes, plan.world, busbw)
        ctx.log(f"training: {name}, {plan.world} emulated ranks x {steps} steps")
        micro: list = []
        info = {"run": name, "mix": mix}
        rows = emulate(
            model, opt, corpus, plan, seed=ctx.seed, collective_s=coll, run_info=info, micro=micro
        )
        rows["grad_bytes"], rows["busbw_gbps"] = gbytes, busbw
        rows["checkpointing"] = bool(prof.get("checkpointing", False))
        rows["dtype"] = prof["dtype"]
        ranks.append(rows)
        micros.append(pd.DataFrame(micro))
        parts.save(name + "-micro", steps, micros[-1], 0.0)
        seconds = time.perf_counter() - t_run
        parts.save(name, steps, rows, seconds)
        spent += seconds - est
        meas_s, meas_work = meas_s + seconds, meas_work + plan.steps * plan.world
        runs.append({"run": name, "status": "ok"})
        del model, opt
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    # (every run deferred to a later invocation: no rows yet; run() then raises TrainingIncomplete)
    rows = pd.concat(ranks, ignore_index=True) if ranks else pd.DataFrame()
    micro = [m for m in micros if m is not None]
    micro = pd.concat(micro, ignore_index=True) if micro else pd.DataFrame()
    return rows, pd.DataFrame(runs), parts, micro
