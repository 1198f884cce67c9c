"""The training experiment's single-purpose runs beside the emulation
(suite.experiments.training), on the same model (diffusers' Wan transformer of the profile):
- C14 (training_maxseq): peak allocated memory of one sample's step (forward + backward, with the
  optimizer's state resident) at a few S, per AdaLN path, through the training step itself (a
  one-rank Plan of one 480p clip); a line through them gives the longest S (whole 480p frames)
  within the Wan path's peak at 48,360 tokens (31 frames, ~the paper's 48,000), verified by one
  more step at that S.
- C15 (training_loss): one rank, sequences <= 7,800 tokens, same seed, data and per-sample noise
  (common random numbers): Wan vs fused AdaLN (equal-token), and equal-token vs dual vs the
  global policy (Wan AdaLN; the global plan for one rank: micro-batches of <= the loss runs'
  memory budget, accumulated); once per seed of the profile's `loss_seeds` (column `seed`: data
  order, initial weights, plan and noise are that seed's draw; the runs of one seed are paired).
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from suite.balance.plan import Plan
from suite.balance.policies import crossover_for_m_comp
from suite.experiments.training.common import _new_model, _plan

FRAME_TOKENS_480P = 1560  # tokens of one latent frame at 480 x 832


def clip_corpus(S: int) -> pd.DataFrame:
    """One 480p clip of S tokens (S a whole number of latent frames) as a one-sample corpus."""
    if S % FRAME_TOKENS_480P:
        raise ValueError(f"S must be a multiple of {FRAME_TOKENS_480P} (480p frames), got {S}")
    frames = 4 * (S // FRAME_TOKENS_480P - 1) + 1
    return pd.DataFrame({"frames": [frames], "height": [480], "width": [832], "tokens": [S]})


def probe_peak(model, opt, S: int, seed: int = 0) -> int:
    """Peak allocated bytes of one training step of one S-token clip (suite.train.step)."""
    from suite.train.step import train_step

    plan = Plan.from_micro_batches(1, [[[[0]]]], [[[1.0]]], "probe")
    return train_step(model, opt, plan, 0, clip_corpus(S), ranks=[0], seed=seed).ranks[0][
        "peak_mem_bytes"
    ]


def _maxseq(ctx, prof, fused_reason) -> pd.DataFrame:
    import torch

    if not prof["maxseq_probes"] or ctx.device != "cuda":
        return pd.DataFrame(columns=["adaln", "S", "peak_mem_bytes", "kind"])
    rows, ft = [], prof["frame_tokens"]
    impls = ["wan"] + ([] if fused_reason else ["fused"])
    ref_peak = None
    for impl in impls:
        model, opt = _new_model(prof, impl, torch.device(ctx.device), ctx.seed)
        layers = len(model.blocks)

        step = functools.partial(probe_peak, model, opt, seed=ctx.seed)

        step(prof["maxseq_probes"][0])  # optimizer state allocated, kernels chosen
        pts = []
        for s in prof["maxseq_probes"]:
            pts.append((s, step(s)))
            rows.append(
                {
                    "adaln": impl,
                    "S": s,
                    "peak_mem_bytes": pts[-1][1],
                    "kind": "probe",
                    "layers": layers,
                }
            )
        if impl == "wan":
            ref_peak = dict(pts)[prof["maxseq_ref"]]
        m1, m0 = np.polyfit([p[0] for p in pts], [p[1] for p in pts], 1)
        # the baseline's own longest sequence is the reference length, by definition
        s_max = (
            prof["maxseq_ref"] if impl == "wan" else int(round((ref_peak - m0) / m1, 6) // ft * ft)
        )
        for _ in range(4):  # verify the prediction with a real step; step down a frame if over
            peak = step(s_max)
            rows.append(
                {
                    "adaln": impl,
                    "S": s_max,
                    "peak_mem_bytes": peak,
                    "kind": "verify",
                    "layers": layers,
                }
            )
            if peak <= ref_peak:
                break
            s_max -= ft
        rows.append(
            {
                "adaln": impl,
                "S": s_max,
                "peak_mem_bytes": ref_peak,
                "kind": "max",
                "layers": layers,
            }
        )
        del step, model, opt
        torch.cuda.empty_cache()
    return pd.DataFrame(rows)


def _loss_runs(ctx, prof, budgets, fused_reason, seed: int) -> pd.DataFrame:
    """The C15 runs of one seed: its corpus draw, initial weights, plans and noise."""
    import torch

    from suite.train.data import load_corpus
    from suite.train.plan import Budgets

    corpus = load_corpus(prof["corpus"], prof["mix"], seed)
    corpus = corpus[corpus.tokens <= prof["loss_max_S"]].reset_index(drop=True)
    s_cross = (
        crossover_for_m_comp(budgets.m_mem, budgets.p, budgets.m_comp) if budgets.p != 1 else 1.0
    )
    m = float(prof["loss_m_mem"])
    s_small = s_cross * m / budgets.m_mem  # the crossover scaled with the smaller memory budget
    small = Budgets(m, m * s_small ** (budgets.p - 1), budgets.p, "loss runs")
    from suite.train.emulate import emulate

    out = []
    specs = [
        ("equal-token", "wan"),
        ("equal-token", "fused"),
        ("dual", "wan"),
        ("global", "wan"),  # beyond the paper: micro-batches + accumulation, loss / global tokens
    ]
    for policy, adaln in specs:
        if adaln == "fused" and fused_reason:
            continue
        model, opt = _new_model(prof, adaln, torch.device(ctx.device), seed)
        plan = _plan(ctx, corpus, policy, small, 1, prof["loss_steps"], seed)
        rows = emulate(model, opt, corpus, plan, seed=seed, collective_s=0.0)
        out.append(
            pd.DataFrame(
                {
                    "seed": seed,
                    "run": f"{policy}/{adaln}",
                    "policy": policy,
                    "adaln": adaln,
                    "layers": len(model.blocks),
                    "step": rows.step,
                    "loss": rows.loss,
                    "tokens": rows.tokens,
                }
            )
        )
    return pd.concat(out, ignore_index=True)
