"""The global policy in the trainer (issue 7): a coordinated per-step plan with gradient accumulation.

Every rank builds the same plan with suite.balance's GlobalBatchSampler (seeded, deterministic: no
communication): plan[step].ranks[r] is rank r's list of micro-batches (at most M_mem tokens each,
mixed sequence lengths), so ranks may run different numbers of micro-batches, or none. A micro-batch
is the planner's unit; for execution a rank's samples are regrouped into batches of one sequence
length (the model's batches hold one S) of at most its largest micro-batch's tokens, one forward +
backward each, gradients accumulate.

Loss normalisation: each sub-batch's loss is its mean over latent elements (flow_matching_loss's
definition) times its tokens / the step's global token count. Summed over every rank's sub-batches
(all_reduce SUM, no division by the world size) the gradient is the token-weighted mean over the
whole global batch, i.e. exactly what standard data parallelism over one batch of these samples
computes, whatever the split. Noise and timesteps are drawn per sample (seed, step, sample index),
so they do not depend on which rank or micro-batch a sample lands in.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from suite.train.data import make_batch


def planner_cost(cost_json: str | None, p: float):
    """The planner's cost model: the cost JSON's (a, b, p), else b * S^p with a = 0, b = 1."""
    from suite.balance.costmodel import CostModel

    if cost_json:
        return CostModel.load(cost_json)
    return CostModel(a=0.0, b=1.0, p=float(p), source="b*S^p, a=0 (no cost JSON)")


def global_plan(
    corpus: pd.DataFrame,
    cost,
    m_mem: float,
    world: int,
    steps: int,
    seed: int = 0,
    max_defer: int = 1,
) -> list:
    """plan[step] = StepPlan(ranks=[model batches of rank r], global_tokens), epochs chained:
    the global policy's Plan (suite.balance.plan.plan_steps)."""
    from suite.balance.global_policy import GlobalPolicy, StepPlan
    from suite.balance.plan import plan_steps

    tokens = corpus.tokens.to_numpy()
    m_mem = max(float(m_mem), float(tokens.max()))
    pol = GlobalPolicy(m_mem=m_mem, planner=cost, max_defer=max_defer)
    plan = plan_steps(pol, tokens, world, steps, seed)
    return [StepPlan.of(plan, tokens, k) for k in range(plan.steps)]


def sub_batches(micro_batch, tokens) -> list[list[int]]:
    """A micro-batch's samples grouped by sequence length (longest first), one model batch each."""
    groups: dict[int, list[int]] = {}
    for i in micro_batch:
        groups.setdefault(int(tokens[i]), []).append(int(i))
    return [groups[s] for s in sorted(groups, reverse=True)]


def sample_noise(
    x0: torch.Tensor, indices, seed: int, step: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(t [B], eps like x0) drawn per sample from (seed, step, sample index)."""
    ts, eps = [], []
    for i in indices:
        g = torch.Generator(device=x0.device)
        g.manual_seed(((int(seed) * 7_919 + int(step)) * 1_000_003 + int(i) + 1) % (2**63 - 1))
        ts.append(torch.rand(1, device=x0.device, generator=g))
        eps.append(torch.randn(x0.shape[1:], device=x0.device, generator=g, dtype=x0.dtype))
    return torch.cat(ts), torch.stack(eps)


def weighted_loss(model, x0, ctx, t, eps, dtype: str) -> torch.Tensor:
    """flow_matching_loss with given (t, eps): mean over the sub-batch's latent elements."""
    from suite.train.trainer import DTYPES

    amp = DTYPES[dtype]
    with torch.autocast(x0.device.type, dtype=amp or torch.float32, enabled=amp is not None):
        tt = t.view(-1, 1, 1, 1, 1)
        pred = model((1 - tt) * x0 + tt * eps, t * 1000, ctx)
        return F.mse_loss(pred.float(), (eps - x0).float())


def same_length_batches(micro_batches, tokens, cap: float | None = None) -> list[list[int]]:
    """A rank's samples regrouped into model batches of one sequence length each, of at most `cap`
    tokens (default: the rank's largest micro-batch, so no batch needs more memory than the plan's).

    Fewer forward passes than running each mixed micro-batch as its own sub-batches; the rank's
    samples, hence its gradient contribution, are the same."""
    idx = [int(i) for mb in micro_batches for i in mb]
    if not idx:
        return []
    if cap is None:
        cap = max(int(sum(tokens[i] for i in mb)) for mb in micro_batches)
    out = []
    for group in sub_batches(idx, tokens):
        per = max(1, int(cap // int(tokens[group[0]])))
        out += [group[k : k + per] for k in range(0, len(group), per)]
    return out


def rank_batches(
    corpus: pd.DataFrame,
    micro_batches,
    *,
    text_len: int,
    text_dim: int,
    seed: int,
    device,
    cap: float | None = None,
) -> list[tuple[list[int], torch.Tensor, torch.Tensor]]:
    """This rank's model batches (same_length_batches) as tensors: [(indices, x0, text), ...]."""
    tokens = corpus.tokens.to_numpy()
    out = []
    for idx in same_length_batches(micro_batches, tokens, cap):
        x0, ctx, _ = make_batch(
            corpus, idx, text_len=text_len, text_dim=text_dim, seed=seed, device=device
        )
        out.append((idx, x0, ctx))
    return out


def rank_backward(model, batches, *, seed: int, step: int, global_tokens: int, dtype: str) -> dict:
    """Forward + backward of every sub-batch with weight tokens / global tokens (grads accumulate).

    Returns this rank's token-mean loss (nan when it has no samples) and its counts."""
    tok_sum, loss_sum, samples, s2 = 0, 0.0, 0, 0.0
    for idx, x0, ctx in batches:
        S = int(np.prod(x0.shape[2:])) // 4
        tok = S * len(idx)
        t, eps = sample_noise(x0, idx, seed, step)
        loss = weighted_loss(model, x0, ctx, t, eps, dtype)
        (loss * (tok / global_tokens)).backward()
        loss_sum += float(loss.detach()) * tok
        tok_sum, samples, s2 = tok_sum + tok, samples + len(idx), s2 + len(idx) * float(S) ** 2
    return {
        "loss": loss_sum / tok_sum if tok_sum else math.nan,
        "tokens": tok_sum,
        "samples": samples,
        "sub_batches": len(batches),
        "sum_s2": s2,
    }


def ensure_grads(params) -> None:
    """Zero gradients where a rank computed none (an empty rank still joins the all-reduce)."""
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)


def log_fields(info: dict, micro_batches, corpus: pd.DataFrame) -> dict:
    """The rank row's B, S, bucket for a mixed-length rank: S = tokens / B (rounded), bucket = max S."""
    tokens = corpus.tokens.to_numpy()
    idx = [i for mb in micro_batches for i in mb]
    B = len(idx)
    return {
        "B": B,
        "S": int(round(info["tokens"] / B)) if B else 0,
        "tokens": info["tokens"],
        "samples": B,
        "bucket": int(max(tokens[idx])) if B else 0,
        "micro_batches": len(micro_batches),
        "sub_batches": info["sub_batches"],
        "sum_s2": info["sum_s2"],
    }
