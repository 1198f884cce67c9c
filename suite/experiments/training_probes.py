"""The training experiment's single-purpose runs beside the emulation
(suite/experiments/training.py):
- C14 (training_maxseq): peak allocated memory of one sample's full step at a few S, per AdaLN
  path; a line through them gives the longest S (whole 480p frames) within the Wan path's peak at
  48,360 tokens (31 frames, ~the paper's 48,000), verified by one more step at that S.
- C15 (training_loss): 40 steps, one rank, sequences <= 7,800 tokens, same seed and data: Wan vs
  fused vs eager AdaLN (equal-token), and equal-token vs dual vs the global policy (Wan AdaLN;
  the global plan for one rank: micro-batches of <= the loss runs' memory budget, accumulated).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from suite.balance.policies import crossover_for_m_comp
from suite.experiments.training_common import _new_model, _plan


def _maxseq(ctx, prof, fused_reason) -> pd.DataFrame:
    import torch

    from suite.train.stepfn import make_step_fn

    if not prof["maxseq_probes"] or ctx.device != "cuda":
        return pd.DataFrame(columns=["adaln", "S", "peak_mem_bytes", "kind"])
    rows, ft = [], prof["frame_tokens"]
    impls = ["wan", "eager"] + ([] if fused_reason else ["fused"])
    ref_peak = None
    for impl in impls:
        step = make_step_fn(
            prof["model"], prof["layers"], device=ctx.device, adaln=impl, dtype=prof["dtype"]
        )
        step(1, prof["maxseq_probes"][0])
        pts = []
        for s in prof["maxseq_probes"]:
            pts.append((s, step(1, s)[1]))
            rows.append(
                {
                    "adaln": impl,
                    "S": s,
                    "peak_mem_bytes": pts[-1][1],
                    "kind": "probe",
                    "layers": step.model.cfg.num_layers,
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
            peak = step(1, s_max)[1]
            rows.append(
                {
                    "adaln": impl,
                    "S": s_max,
                    "peak_mem_bytes": peak,
                    "kind": "verify",
                    "layers": step.model.cfg.num_layers,
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
                "layers": step.model.cfg.num_layers,
            }
        )
        del step
        torch.cuda.empty_cache()
    return pd.DataFrame(rows)


def _loss_runs(ctx, prof, budgets, fused_reason) -> pd.DataFrame:
    import torch

    from suite.train.data import load_corpus
    from suite.train.plan import Budgets

    corpus = load_corpus(prof["corpus"], prof["mix"], ctx.seed)
    corpus = corpus[corpus.tokens <= prof["loss_max_S"]].reset_index(drop=True)
    s_cross = (
        crossover_for_m_comp(budgets.m_mem, budgets.p, budgets.m_comp) if budgets.p != 1 else 1.0
    )
    m = float(prof["loss_m_mem"])
    s_small = s_cross * m / budgets.m_mem  # the crossover scaled with the smaller memory budget
    small = Budgets(m, m * s_small ** (budgets.p - 1), budgets.p, "loss runs")
    out = []
    specs = [
        ("equal-token", "wan"),
        ("equal-token", "eager"),
        ("equal-token", "fused"),
        ("dual", "wan"),
        ("global", "wan"),  # issue 7: micro-batches + accumulation, loss / global tokens
    ]
    for policy, adaln in specs:
        if adaln == "fused" and fused_reason:
            continue
        model, opt = _new_model(prof, adaln, torch.device(ctx.device), ctx.seed)
        plan, run_ = _plan(ctx, corpus, policy, small, 1, prof["loss_steps"])
        rows = run_(
            model,
            opt,
            corpus,
            plan,
            seed=ctx.seed,
            dtype=prof["dtype"],
            policy=policy,
            collective_s=0.0,
        )
        out.append(
            pd.DataFrame(
                {
                    "run": f"{policy}/{adaln}",
                    "policy": policy,
                    "adaln": adaln,
                    "layers": model.cfg.num_layers,
                    "step": rows.step,
                    "loss": rows.loss,
                    "tokens": rows.tokens,
                }
            )
        )
    return pd.concat(out, ignore_index=True)
