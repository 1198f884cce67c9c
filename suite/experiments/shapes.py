"""shapes: the per-bucket latency table of the training step (flow-matching fwd + bwd + AdamW).

The model is diffusers' `WanTransformer3DModel` (suite.train.step.new_model, random init), timed by
suite.train.stepfn.make_step_fn: the trainer's own forward + backward (suite.train.step) on a batch
of the one batch builder (suite.model.wan.make_batch), then the AdamW step. On a GPU it is the Wan
2.1 1.3B architecture, all 30 blocks, D = 1536, bf16 with diffusers' fp32 modules, per-block
gradient checkpointing, eager, text length 512; on a CPU diffusers' tiny config (2 blocks, D = 32,
fp32, text length 8), which only checks the mechanics.

Shapes (suite.balance.shapebench.equal_token_grid): every bucket at the equal-token batch
B = floor(M_tok / S) with M_tok = 75,600 (one 81-frame 720p clip: the smallest budget under which
the longest bucket fits, so B = 1 there), plus B = 1 and a ladder of smaller B where B * S stays
under `ladder_tokens`, so that the cost fit separates the per-sample, per-token and attention
terms. Each shape: one warm-up step, then `repeats` timed steps back to back; shapes run in order
of descending B * S. A shape that runs out of device memory is recorded in `shapes_skipped`.

Budget (planning estimate, not a result: a + c*B + b*B*S + d*B*S^2 with a = 0.1 s and c = 5 ms
assumed, b = 2.97e-5 s and d = 1.42e-9 s solved from early H200 measurements, 2.6 s at one
32,760-token clip and a 3.8x spread at equal tokens, i.e. 2.73 s at (48, 1560) and 10.5 s at
(1, 75600)):
  quick: 8 of the default mix's 11 buckets (1560, 3600, 7800, 14040, 20280, 32760, 46800,
         75600; the quadratic fit prices the other three), warm-up + 2 repeats. Measured on one
         H200 (reports/reference/h200/shapes-7f37301) with all 11 buckets: 219 s (131.5 s
         timed + 73.5 s warm-up, 25 shapes); the three dropped buckets' equal-token steps took
         4.4 + 4.0 + 7.9 s per pass, so ~16 s x 3 + their ladder shapes: ~150 s with 8.
  full:  16 buckets, 40 shapes (ladder <= 25,000 tokens), warm-up + 3 repeats: ~385 s.
  cpu:   tiny config, S 64-2048 (M_tok 4,096), 14 shapes, warm-up + 3 repeats: ~15-25 s on 2 shared
         cores.

Tables
  shapes_sweep    one row per timed repeat: B, S, tokens (= B*S), bs2 (= B*S^2), repeat, step_s,
                  peak_mem_bytes (max allocated during the step; 0 on CPU), device, model, layers,
                  dim, dtype, adaln, checkpointing, m_tok (the equal-token budget: the shape with
                  B = m_tok // S is its bucket's equal-token batch), text_len, arch (the model
                  class and config)
  shapes_skipped  one row per shape that ran out of memory: B, S, tokens, reason + the same meta
  shapes_warmup   one row per shape: its warm-up step's step_s and peak_mem_bytes (what the first
                  step at a shape costs beyond the timed ones; not used by any fit)
The `costmodel` experiment fits shapes_sweep (C1-C3); summarize() emits nothing itself.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace

import pandas as pd

from suite.balance.shapebench import equal_token_grid, estimate_seconds, sweep_with_skips
from suite.experiments import metric_rows
from suite.rundir import RunContext

NAME = "shapes"
NEEDS = "cpu"
# seconds on one H200 (reproduce --budget defers the experiment when they do not fit): measured
# in the references (quick-5753865: 162 s; full: 438 s)
SECONDS = {"quick": 170, "full": 445}

M_TOK = 75_600  # equal-token budget of the sweep: one 81-frame 720p clip
# 480p: image, 17, 33, 49, 65, 81 frames; 720p: image, 17, 49, 65, 81 frames (suite.data.corpus)
QUICK_BUCKETS = (
    1560,
    3600,
    7800,
    14040,
    20280,
    32760,
    46800,
    75600,
)  # 8 of the 11: H200 sweep 219 s -> ~150 s
FULL_BUCKETS = (1560, 3600, 7800, 10920, 14040, 18000, 20280, 23400, 26520, 32760, 39600, 46800,
                54000, 61200, 68400, 75600)  # fmt: skip
# the planning prior of the docstring: step seconds = a + c*B + b*B*S + d*B*S^2 on one H200
H200_PRIOR = dict(a=0.1, c=0.005, b=2.969e-5, d=1.4185e-9)


@dataclass(frozen=True)
class Profile:
    model: str  # a name of suite.model.wan.CONFIGS
    layers: int | None  # None: the config's (30 for wan-1.3b)
    dtype: str
    checkpointing: bool
    buckets: tuple[int, ...]
    m_tok: int
    ladder_tokens: int
    warmup: int
    repeats: int
    adaln: str = "wan"


PROFILES = {
    "cpu": Profile("tiny", None, "fp32", True, (64, 256, 1024, 2048), 4096, 512, 1, 3),
    "quick": Profile("wan-1.3b", None, "bf16", True, QUICK_BUCKETS, M_TOK, 12_000, 1, 2),
    "full": Profile("wan-1.3b", None, "bf16", True, FULL_BUCKETS, M_TOK, 25_000, 1, 3),
}


def profile_for(ctx: RunContext) -> Profile:
    """The profile of the run (cpu on a machine without CUDA), with ctx.options["shapes"] applied."""
    name = "cpu" if ctx.device != "cuda" else ("full" if ctx.profile == "full" else "quick")
    over = dict(ctx.options.get("shapes", {}))
    if unknown := set(over) - set(Profile.__dataclass_fields__):
        raise ValueError(
            f"options['shapes'] has unknown keys {sorted(unknown)}; accepted: "
            f"{sorted(Profile.__dataclass_fields__)}"
        )
    return replace(PROFILES[name], **over)


def prior_seconds(B, S):
    """The planning prior's step seconds (H200_PRIOR), for the budget estimate and the log."""
    p = H200_PRIOR
    return p["a"] + p["c"] * B + p["b"] * B * S + p["d"] * B * S * S


def run(ctx: RunContext) -> dict[str, pd.DataFrame]:
    import torch

    from suite.train.stepfn import make_step_fn

    prof = profile_for(ctx)
    shapes = equal_token_grid(prof.buckets, prof.m_tok, prof.ladder_tokens)
    if ctx.device == "cuda":
        est = estimate_seconds(shapes, prior_seconds, prof.warmup, prof.repeats)
        ctx.log(f"shapes: {len(shapes)} shapes, planning estimate ~{est:.0f} s on one H200")
    threads = torch.get_num_threads()
    if ctx.device != "cuda":
        torch.set_num_threads(1)  # small CPU steps: one thread is fastest and least noisy
    try:
        t0 = time.perf_counter()
        step = make_step_fn(
            prof.model,
            prof.layers,
            device=ctx.device,
            adaln=prof.adaln,
            dtype=prof.dtype,
            checkpointing=prof.checkpointing,
            seed=ctx.seed,
        )
        ctx.log(f"shapes: model built in {time.perf_counter() - t0:.1f} s")
        meta = _meta(ctx, prof, step)
        timed, skipped, warm = sweep_with_skips(
            step, shapes, prof.warmup, prof.repeats, meta, ctx.log
        )
    finally:
        torch.set_num_threads(threads)
    return {"shapes_sweep": timed, "shapes_skipped": skipped, "shapes_warmup": warm}


def _meta(ctx: RunContext, prof: Profile, step) -> dict:
    import torch

    cfg = step.config
    return {
        "device": torch.cuda.get_device_name(0) if ctx.device == "cuda" else "cpu",
        "model": prof.model,
        "layers": cfg.num_layers,
        "dim": cfg.dim,
        "dtype": prof.dtype,
        "adaln": prof.adaln,
        "checkpointing": bool(step.checkpointing),
        "m_tok": prof.m_tok,
        "text_len": step.text_len,
        "arch": f"diffusers {type(step.model).__name__} {asdict(cfg)}",
    }


def summarize(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    return metric_rows([])  # the costmodel experiment turns shapes_sweep into C1-C3 metrics
