"""Shape benchmarking: time any step function over a grid of (B, S) shapes.

`step_fn(B, S)` runs one training step (or a stand-in) and returns its seconds, or a pair
(seconds, peak_bytes). On a GPU the trainer's step function plugs in; on a CPU a small torch model
(suite.train.stepfn) or a synthetic function serves. The result is the tidy `shapes_sweep` table:
one row per timed repeat, warm-up runs discarded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd

SWEEP_COLUMNS = ["B", "S", "tokens", "bs2", "repeat", "step_s", "peak_mem_bytes"]


def grid(seq_lens: Iterable[int], token_budget: int, batch_sizes: Iterable[int] = (1, 2, 4, 8)):
    """(B, S) pairs with B*S <= token_budget (B = 1 always kept so every S is measured)."""
    return [(b, s) for s in seq_lens for b in batch_sizes if b == 1 or b * s <= token_budget]


def sweep(
    step_fn: Callable[[int, int], float | tuple[float, float]],
    shapes: Iterable[tuple[int, int]],
    warmup: int = 1,
    repeats: int = 3,
    meta: dict | None = None,
) -> pd.DataFrame:
    """Run step_fn warmup + repeats times per shape; one row per timed repeat (SWEEP_COLUMNS + meta)."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats}, {warmup}")
    rows = []
    for B, S in shapes:
        B, S = int(B), int(S)
        if B < 1 or S < 1:
            raise ValueError(f"shapes must have B >= 1 and S >= 1, got ({B}, {S})")
        for i in range(-warmup, repeats):
            out = step_fn(B, S)
            secs, peak = out if isinstance(out, tuple) else (out, math.nan)
            if i >= 0:
                rows.append((B, S, B * S, B * S * S, i, float(secs), float(peak)))
    df = pd.DataFrame(rows, columns=SWEEP_COLUMNS)
    for k, v in (meta or {}).items():
        df[k] = v
    return df


def synthetic_step_fn(
    a: float = 0.01,
    b: float = 2e-9,
    p: float = 1.8,
    noise_cv: float = 0.03,
    seed: int = 0,
    m0: float = 1e8,
    m1: float = 4e3,
):
    """A stand-in step function: seconds = (a + b*B*S^p) x lognormal noise, peak = m0 + m1*B*S.

    It does not sleep; it returns the time it would have taken (for tests and dry runs).
    """
    rng = np.random.default_rng(seed)

    def step(B: int, S: int) -> tuple[float, float]:
        t = (a + b * B * S**p) * rng.lognormal(0.0, noise_cv)
        return float(t), float(m0 + m1 * B * S)

    return step
