"""shapes: a (B, S) sweep of the real training step (forward + backward + AdamW): latency + memory.

Budget: cpu profile <= 60 s on 2 cores (tiny model, fp32, S 16-2048, 5 repeats); quick <= ~60 s on one H200
(wan-1.3b width D = 1536, 2 layers, bf16, S from one 480p image (1,560) to one 720p 81-frame video
(75,600), B*S up to ~100k tokens, 3 timed repeats after one warm-up per shape); full: 4 layers,
5 repeats, B*S up to ~160k.

Table `shapes_sweep`: one row per timed repeat: B, S, tokens (= B*S), bs2 (= B*S^2), repeat, step_s,
peak_mem_bytes (max allocated during the step; 0 on CPU), device, model, layers, dim, dtype, adaln.
The `costmodel` experiment fits it (C3; C1/C2 over the sweep); summarize() emits nothing itself.
"""

from __future__ import annotations

import pandas as pd
import torch

from suite.experiments import metric_rows
from suite.rundir import RunContext

NAME = "shapes"
CLAIMS: tuple[str, ...] = ()
NEEDS = "cpu"

S_CUDA = (1560, 3120, 7800, 14040, 20280, 32760, 46800, 75600)
S_CPU = (16, 64, 128, 256, 512, 1024, 2048)
PROFILES = {
    "cpu": dict(
        model="tiny", layers=None, dtype="fp32", S=S_CPU, B=(1, 2, 4, 8), max_tokens=4096, repeats=5
    ),
    "quick": dict(
        model="wan-1.3b",
        layers=2,
        dtype="bf16",
        S=S_CUDA,
        B=(1, 2, 4, 8, 16, 32, 64),
        max_tokens=100_000,
        repeats=3,
    ),
    "full": dict(
        model="wan-1.3b",
        layers=4,
        dtype="bf16",
        S=S_CUDA,
        B=(1, 2, 3, 4, 6, 8, 16, 32, 64, 96),
        max_tokens=160_000,
        repeats=5,
    ),
}


def grid(S, B, max_tokens) -> list[tuple[int, int]]:
    """(B, S) pairs with B*S <= max_tokens, and B = 1 always (the longest sample must be measured)."""
    return [(b, s) for s in S for b in B if b == 1 or b * s <= max_tokens]


def sweep(step, pairs, repeats: int, meta: dict, log=None) -> pd.DataFrame:
    rows = []
    for b, s in pairs:
        step(b, s)  # warm-up: kernels, allocator, autotuning for this shape
        for r in range(repeats):
            sec, peak = step(b, s)
            rows.append(
                {
                    "B": b,
                    "S": s,
                    "tokens": b * s,
                    "bs2": float(b) * s * s,
                    "repeat": r,
                    "step_s": sec,
                    "peak_mem_bytes": peak,
                    **meta,
                }
            )
        if log:
            log(f"shapes: B={b} S={s} {rows[-1]['step_s'] * 1e3:.1f} ms")
    return pd.DataFrame(rows)


def run(ctx: RunContext) -> dict[str, pd.DataFrame]:
    from suite.train.stepfn import make_step_fn

    prof = dict(
        PROFILES["cpu" if ctx.device != "cuda" else ("full" if ctx.profile == "full" else "quick")]
    )
    prof.update(ctx.options.get("shapes", {}))
    threads = torch.get_num_threads()
    if ctx.device != "cuda":
        torch.set_num_threads(
            1
        )  # small CPU steps: one thread is fastest and least noisy on 2 cores
    try:
        step = make_step_fn(
            prof["model"],
            prof["layers"],
            device=ctx.device,
            dtype=prof["dtype"],
            adaln="wan",
            seed=ctx.seed,
        )
        cfg = step.model.cfg
        meta = {
            "device": torch.cuda.get_device_name(0) if ctx.device == "cuda" else "cpu",
            "model": cfg.name,
            "layers": cfg.num_layers,
            "dim": cfg.dim,
            "dtype": prof["dtype"],
            "adaln": "wan",
        }
        table = sweep(
            step, grid(prof["S"], prof["B"], prof["max_tokens"]), prof["repeats"], meta, ctx.log
        )
    finally:
        torch.set_num_threads(threads)
    return {"shapes_sweep": table}


def summarize(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    return metric_rows([])  # the costmodel experiment turns shapes_sweep into C1-C3 metrics
