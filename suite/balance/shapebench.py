"""Shape benchmarking: which (B, S) shapes to time, and timing any step function over them.

`step_fn(B, S)` runs one training step (or a stand-in) and returns its seconds, or a tuple
(seconds, peak_bytes[, optimizer_s]) (optimizer_s: the part of the step a real step pays once,
not per micro-batch); the training step itself (`suite.train.stepfn.make_step_fn`, on
suite.train.step) plugs in, in tests a synthetic function. A step that raises
`ShapeOutOfMemory` is recorded as skipped, not timed.

`sweep` gives the tidy `shapes_sweep` table (one row per timed repeat, warm-ups discarded) and
`sweep_with_skips` also the shapes that ran out of memory and the warm-up steps' times. Each shape is warmed up once and then
timed `repeats` times back to back, so no shape is warmed twice.

Grids: `equal_token_grid` is the one the cost model needs: every bucket at the equal-token batch
B = floor(M_tok / S) (what the baseline trains), plus a ladder of smaller B per bucket (B = 1
always, more where B * S stays cheap) so that a fit can tell the per-sample, per-token and
per-token^2 terms apart. `grid` is the plain B x S product under a token budget.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd

SWEEP_COLUMNS = ["B", "S", "tokens", "bs2", "repeat", "step_s", "peak_mem_bytes", "optimizer_s"]
SKIP_COLUMNS = ["B", "S", "tokens", "reason"]
WARMUP_COLUMNS = ["B", "S", "tokens", "warmup", "step_s", "peak_mem_bytes"]
LADDER = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96)


class ShapeOutOfMemory(MemoryError):
    """One step of B samples of S tokens did not fit in device memory."""

    def __init__(self, B: int, S: int, reason: str = ""):
        super().__init__(f"B={B} S={S} ran out of device memory: {reason}")
        self.B, self.S, self.reason = int(B), int(S), reason


def grid(seq_lens: Iterable[int], token_budget: int, batch_sizes: Iterable[int] = (1, 2, 4, 8)):
    """(B, S) pairs with B*S <= token_budget (B = 1 always kept so every S is measured)."""
    return [(b, s) for s in seq_lens for b in batch_sizes if b == 1 or b * s <= token_budget]


def equal_token_batch(S: int, m_tok: int) -> int:
    """B = floor(M_tok / S): the equal-token rule's batch of bucket S (ValueError if S > M_tok)."""
    if S < 1 or S > m_tok:
        raise ValueError(f"S must be in [1, M_tok = {m_tok}] for the equal-token rule, got {S}")
    return int(m_tok // S)


def equal_token_grid(
    buckets: Iterable[int], m_tok: int, ladder_tokens: int, ladder: Iterable[int] = LADDER
) -> list[tuple[int, int]]:
    """(B, S) per bucket: the equal-token B, B = 1, and every ladder B below the equal-token one
    with B * S <= ladder_tokens. Sorted by descending B * S, then S (about descending memory: the
    allocator grows once, in the first shapes)."""
    out = set()
    for s in (int(x) for x in buckets):
        top = equal_token_batch(s, m_tok)
        out |= {(top, s), (1, s)} | {(b, s) for b in ladder if b < top and b * s <= ladder_tokens}
    return sorted(out, key=lambda bs: (-bs[0] * bs[1], -bs[1]))


def sweep_with_skips(
    step_fn: Callable[[int, int], float | tuple[float, ...]],
    shapes: Iterable[tuple[int, int]],
    warmup: int = 1,
    repeats: int = 3,
    meta: dict | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(timed rows: SWEEP_COLUMNS, skipped shapes: SKIP_COLUMNS, warm-up rows: WARMUP_COLUMNS),
    each + meta. Per shape: `warmup` untimed calls, then `repeats` timed ones; a ShapeOutOfMemory
    in any of them skips the shape (none of its rows is kept)."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats}, {warmup}")
    rows, skipped, warm = [], [], []
    for B, S in shapes:
        B, S = int(B), int(S)
        if B < 1 or S < 1:
            raise ValueError(f"shapes must have B >= 1 and S >= 1, got ({B}, {S})")
        calls = []
        try:
            for _ in range(warmup + repeats):
                out = step_fn(B, S)
                out = out if isinstance(out, tuple) else (out,)
                calls.append(tuple(float(v) for v in (*out, math.nan, math.nan)[:3]))
        except ShapeOutOfMemory as e:
            skipped.append((B, S, B * S, e.reason or str(e)))
            if log:
                log(f"shapes: B={B} S={S} skipped: out of device memory")
            continue
        warm += [(B, S, B * S, i, t, m) for i, (t, m, _) in enumerate(calls[:warmup])]
        rows += [(B, S, B * S, B * S * S, i, *c) for i, c in enumerate(calls[warmup:])]
        if log:
            med = float(np.median([c[0] for c in calls[warmup:]]))
            log(f"shapes: B={B} S={S} median {med:.3f} s of {repeats}")
    tables = (
        pd.DataFrame(rows, columns=SWEEP_COLUMNS),
        pd.DataFrame(skipped, columns=SKIP_COLUMNS),
        pd.DataFrame(warm, columns=WARMUP_COLUMNS),
    )
    for df in tables:
        for k, v in (meta or {}).items():
            df[k] = v
    return tables


def sweep(step_fn, shapes, warmup: int = 1, repeats: int = 3, meta: dict | None = None):
    """The timed rows of `sweep_with_skips` (shapes that ran out of memory are left out)."""
    return sweep_with_skips(step_fn, shapes, warmup, repeats, meta)[0]


def estimate_seconds(
    shapes: Iterable[tuple[int, int]], cost: Callable, warmup: int, repeats: int
) -> float:
    """Seconds a sweep takes if each step costs cost(B, S) (a planning estimate, not a result)."""
    B, S = (np.array(x, dtype=float) for x in zip(*shapes))
    return float((warmup + repeats) * np.sum(cost(B, S)))


def synthetic_step_fn(
    a: float = 0.01,
    b: float = 2e-9,
    p: float = 1.8,
    noise_cv: float = 0.03,
    seed: int = 0,
    m0: float = 1e8,
    m1: float = 4e3,
    capacity: float = math.inf,
):
    """A stand-in step function: seconds = (a + b*B*S^p) x lognormal noise, peak = m0 + m1*B*S;
    raises ShapeOutOfMemory where the peak would exceed `capacity` bytes.

    It does not sleep; it returns the time it would have taken (for tests and dry runs).
    """
    rng = np.random.default_rng(seed)

    def step(B: int, S: int) -> tuple[float, float]:
        peak = m0 + m1 * B * S
        if peak > capacity:
            raise ShapeOutOfMemory(B, S, f"{peak:.3g} bytes > capacity {capacity:.3g}")
        t = (a + b * B * S**p) * rng.lognormal(0.0, noise_cv)
        return float(t), float(peak)

    return step
