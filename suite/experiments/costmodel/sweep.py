"""shapes: the per-bucket latency table of the training step (flow-matching fwd + bwd + AdamW),
and held-out shapes timed beside it for the step model's validation.

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
terms. Held-out shapes (HELDOUT: off the grid, by region: many-sample batches, long single
samples, launch-bound batches) are timed in the same passes and never enter a fit; the costmodel
experiment predicts them (suite.experiments.costmodel.validation).

Order (suite.balance.shapebench.sweep_with_skips): one warm-up pass (each shape once, descending
B * S: the allocator grows once), then round-robin passes in a seeded shuffled order, as a
training run alternates buckets; each shape's repeats spread over the passes, so a slow phase of
the node hits every shape alike. Repeats: `shape_seconds` of timed steps per shape at its warm-up
time, between `repeats` and `max_repeats` (cheap shapes get more: host-bound small shapes are
bimodal on a node, a fast or a slow mode in no fixed order), cut back to fit
`budget_s` (the sweep's seconds, warm-up included). A shape that runs out of device memory is
recorded in `shapes_skipped`.

Budget (a planning estimate, not a result: planned_seconds prices each shape at max(the launch
floor, a + c*B + b*B*S + d*B*S^2) with the planning prior H200_PRIOR):
  quick: 8 of the default mix's 11 buckets (the quadratic fit prices the other three), ladder
         <= 12,000 tokens: 20 shapes + 6 held out, extra repeats for cheap shapes only where the
         budget leaves room. The ladder's small shapes are launch-bound and left out of the fits,
         but C2 reads them: on fewer shapes its interval widens across its boundary.
  full:  16 buckets, 40 shapes (ladder <= 25,000 tokens) + 9 held out, 2-8 repeats.
  cpu:   tiny config, S 64-2048 (M_tok 4,096), 14 shapes + 6 held out, 3-8 repeats.

Tables
  shapes_sweep    one row per timed repeat of a grid shape: B, S, tokens (= B*S), bs2 (= B*S^2),
                  repeat, step_s, peak_mem_bytes (max allocated during the step; 0 on CPU),
                  optimizer_s, pass and order (its round-robin pass and place in it), device,
                  model, layers, dim, dtype, adaln, checkpointing, m_tok (the equal-token budget:
                  the shape with B = m_tok // S is its bucket's equal-token batch), text_len,
                  arch (the model class and config). Sweeps from before the round-robin order
                  lack pass and order (their repeats ran back to back).
  shapes_heldout  the same columns for the held-out shapes' repeats, + region
  shapes_skipped  one row per shape that ran out of memory: B, S, tokens, reason + the same meta
  shapes_warmup   one row per shape: its warm-up step's step_s, peak_mem_bytes and order (what
                  the first step at a shape costs beyond the timed ones; not used by any fit)
The `costmodel` experiment fits shapes_sweep (C1-C3); summarize() emits nothing itself.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

from suite.balance.shapebench import Repeats, equal_token_grid, estimate_seconds, sweep_with_skips
from suite.experiments import metric_rows
from suite.rundir import RunContext

NAME = "shapes"
NEEDS = "cpu"
EVIDENCE = {"shapes_sweep": "measured", "shapes_heldout": "measured"}  # suite.evidence
# seconds on one H200 (reproduce --budget defers the experiment when they do not fit): the
# sweep's budget_s + ~10 s to build the model
SECONDS = {"quick": 175, "full": 445}

M_TOK = 75_600  # equal-token budget of the sweep: one 81-frame 720p clip
# 480p: image, 17, 33, 49, 65, 81 frames; 720p: image, 17, 49, 65, 81 frames (suite.data.corpus)
QUICK_BUCKETS = (1560, 3600, 7800, 14040, 20280, 32760, 46800, 75600)  # 8 of the 11
FULL_BUCKETS = (1560, 3600, 7800, 10920, 14040, 18000, 20280, 23400, 26520, 32760, 39600, 46800,
                54000, 61200, 68400, 75600)  # fmt: skip
# the planning prior of the docstring: step seconds = a + c*B + b*B*S + d*B*S^2 on one H200
H200_PRIOR = dict(a=0.1, c=0.005, b=2.969e-5, d=1.4185e-9)
LAUNCH_FLOOR_S = 0.22  # the H200 node's fast mode for a step of next to no work (planning only)

# Held-out shapes (B, S, region), none on a profile's grid. many_sample: B > 1 between the ladder
# and the equal-token batch;
# long_single: B = 1 at lengths that are no bucket; launch_bound: under the launch floor.
# S: 480p frames of 1560 tokens, 720p of 3600.
HELDOUT_QUICK = (
    (24, 1560, "many_sample"), (10, 3600, "many_sample"),
    (1, 21600, "long_single"), (1, 28800, "long_single"),
    (1, 3120, "launch_bound"), (1, 4680, "launch_bound"),
)  # fmt: skip
HELDOUT_FULL = (
    *HELDOUT_QUICK, (7, 7800, "many_sample"), (1, 57600, "long_single"), (2, 3120, "launch_bound")
)  # fmt: skip
HELDOUT_CPU = (
    (6, 256, "many_sample"), (24, 128, "many_sample"),
    (1, 768, "long_single"), (1, 1536, "long_single"),
    (1, 32, "launch_bound"), (2, 32, "launch_bound"),
)  # fmt: skip
REGIONS = ("many_sample", "long_single", "launch_bound")


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
    repeats: int  # the fewest timed steps a shape gets
    max_repeats: int  # the most (cheap shapes)
    shape_seconds: float  # timed seconds aimed at per shape (repeats = this / warm-up step)
    budget_s: float  # the sweep's seconds, warm-up included: extra repeats are cut to fit
    heldout: tuple[tuple[int, int, str], ...] = ()
    adaln: str = "wan"

    def grid(self) -> list[tuple[int, int]]:
        return equal_token_grid(self.buckets, self.m_tok, self.ladder_tokens)

    def repeats_rule(self) -> Repeats:
        return Repeats(self.repeats, self.max_repeats, self.shape_seconds, self.budget_s)


PROFILES = {
    "cpu": Profile("tiny", None, "fp32", True, (64, 256, 1024, 2048), 4096, 512, 1, 3, 8, 0.2,
                   60.0, HELDOUT_CPU),
    "quick": Profile("wan-1.3b", None, "bf16", True, QUICK_BUCKETS, M_TOK, 12_000, 1, 2, 8, 2.0,
                     165.0, HELDOUT_QUICK),
    "full": Profile("wan-1.3b", None, "bf16", True, FULL_BUCKETS, M_TOK, 25_000, 1, 2, 8, 6.0,
                    435.0, HELDOUT_FULL),
}  # fmt: skip


def profile_for(ctx: RunContext) -> Profile:
    """The profile of the run (cpu on a machine without CUDA), with ctx.options["shapes"] applied."""
    name = "cpu" if ctx.device != "cuda" else ("full" if ctx.profile == "full" else "quick")
    over = dict(ctx.options.get("shapes", {}))
    if unknown := set(over) - set(Profile.__dataclass_fields__):
        raise ValueError(
            f"options['shapes'] has unknown keys {sorted(unknown)}; accepted: "
            f"{sorted(Profile.__dataclass_fields__)}"
        )
    prof = replace(PROFILES[name], **over)
    grid = set(prof.grid())
    if clash := [(B, S) for B, S, _ in prof.heldout if (B, S) in grid]:
        raise ValueError(
            f"held-out shapes {clash} are on the sweep's grid; held-out must be off it"
        )
    if bad := {r for *_, r in prof.heldout} - set(REGIONS):
        raise ValueError(f"held-out regions {sorted(bad)} unknown; accepted: {list(REGIONS)}")
    return prof


def prior_seconds(B, S):
    """The planning prior's step seconds (H200_PRIOR), for the budget estimate and the log."""
    p = H200_PRIOR
    return p["a"] + p["c"] * B + p["b"] * B * S + p["d"] * B * S * S


def planned_seconds(prof: Profile) -> float:
    """The sweep's planning estimate on one H200 (prior_seconds above the launch floor)."""
    shapes = prof.grid() + [(B, S) for B, S, _ in prof.heldout]
    cost = lambda B, S: np.maximum(LAUNCH_FLOOR_S, prior_seconds(B, S))  # noqa: E731
    return estimate_seconds(shapes, cost, prof.warmup, prof.repeats_rule())


def run(ctx: RunContext) -> dict[str, pd.DataFrame]:
    import torch

    from suite.train.stepfn import make_step_fn

    prof = profile_for(ctx)
    grid = prof.grid()
    region = {(B, S): r for B, S, r in prof.heldout}
    # warm-up in descending B * S over grid and held-out shapes alike: the allocator grows once
    shapes = sorted([*grid, *region], key=lambda bs: (-bs[0] * bs[1], -bs[1]))
    if ctx.device == "cuda":
        ctx.log(
            f"shapes: {len(grid)} shapes + {len(region)} held out, planning estimate "
            f"~{planned_seconds(prof):.0f} s on one H200 (budget {prof.budget_s:.0f} s)"
        )
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
            step, shapes, prof.warmup, prof.repeats_rule(), meta, ctx.log, seed=ctx.seed
        )
    finally:
        torch.set_num_threads(threads)
    held = pd.Series([(B, S) in region for B, S in zip(timed["B"], timed["S"])], dtype=bool)
    heldout = timed[held.to_numpy()].reset_index(drop=True)
    heldout["region"] = [region[(B, S)] for B, S in zip(heldout["B"], heldout["S"])]
    return {
        "shapes_sweep": timed[~held.to_numpy()].reset_index(drop=True),
        "shapes_heldout": heldout,
        "shapes_skipped": skipped,
        "shapes_warmup": warm,
    }


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
