"""Shape benchmarking: which (B, S) shapes to time, and timing any step function over them.

`step_fn(B, S)` runs one training step (or a stand-in) and returns its seconds, or a tuple
(seconds, peak_bytes[, optimizer_s]) (optimizer_s: the part of the step a real step pays once,
not per micro-batch); the training step itself (`suite.train.stepfn.make_step_fn`, on
suite.train.step) plugs in, in tests a synthetic function. A step that raises
`ShapeOutOfMemory` is recorded as skipped, not timed.

`sweep` gives the tidy `shapes_sweep` table (one row per timed repeat, warm-ups discarded) and
`sweep_with_skips` also the shapes that ran out of memory and the warm-up steps' times. Order: one
warm-up pass (each shape once, descending memory), then round-robin passes, each visiting the
shapes due in it in a seeded shuffled order, each shape's repeats spread over the passes, so a
slow phase of the machine hits every shape alike rather than the few timed in it; `Repeats` gives
cheap shapes more repeats within the sweep's budget.

`launch_bound` names the shapes whose time the host's kernel launches set, not the model's work
(the fits leave them out: suite.experiments.costmodel).

Grids: `equal_token_grid` is the one the cost model needs: every bucket at the equal-token batch
B = floor(M_tok / S) (what the baseline trains), plus a ladder of smaller B per bucket (B = 1
always, more where B * S stays cheap) so that a fit can tell the per-sample, per-token and
per-token^2 terms apart. `grid` is the plain B x S product under a token budget.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

SWEEP_COLUMNS = ["B", "S", "tokens", "bs2", "repeat", "step_s", "peak_mem_bytes", "optimizer_s"]
SKIP_COLUMNS = ["B", "S", "tokens", "reason"]
WARMUP_COLUMNS = ["B", "S", "tokens", "warmup", "step_s", "peak_mem_bytes"]
# when each timed step ran: its round-robin pass (-1: the warm-up pass) and place in that pass;
# after the meta columns, so the columns of sweeps from before the round-robin order keep places
ORDER_COLUMNS = ["pass", "order"]
# a shape is launch-bound where its predicted GPU work is under 1.25x the launch floor
# (launch_bound)
LAUNCH_MARGIN = 1.25
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


@dataclass(frozen=True)
class Repeats:
    """How many timed steps each shape gets: enough for `shape_seconds` of timed steps at its
    warm-up time (cheap shapes get more), between `lo` and `hi`; where the whole sweep (warm-up
    included) would pass `budget_s`, the extra repeats are taken back, most-repeated shape first."""

    lo: int = 3
    hi: int | None = None  # None: lo (every shape the same count)
    shape_seconds: float = 0.0
    budget_s: float = math.inf

    def __post_init__(self):
        if self.lo < 1 or (self.hi is not None and self.hi < self.lo):
            raise ValueError(f"repeats need 1 <= lo <= hi, got lo={self.lo}, hi={self.hi}")

    def counts(self, warm_s, spent_s: float = 0.0) -> list[int]:
        """Repeats per shape from its warm-up seconds (an upper bound of a step: the first step
        at a shape pays its one-off costs), given `spent_s` of the budget already used."""
        warm = np.maximum(np.asarray(warm_s, float), 1e-9)
        hi = self.lo if self.hi is None else self.hi
        want = np.round(self.shape_seconds / warm) if self.shape_seconds > 0 else 0 * warm
        r = np.clip(want, self.lo, hi).astype(int)
        while r @ warm > self.budget_s - spent_s and (r > self.lo).any():
            r[np.argmax(np.where(r > self.lo, r + warm / warm.sum(), -1))] -= 1
        return r.tolist()


def pass_schedule(repeats: Sequence[int]) -> list[list[int]]:
    """The shapes due in each round-robin pass: shape i with r repeats is due in passes
    floor((j + 1/2) * P / r), j < r, of P = max(repeats), so every shape's repeats spread over
    the whole sweep (a slow phase of the machine hits every shape alike)."""
    P = max(repeats, default=0)
    due = [[] for _ in range(P)]
    for i, r in enumerate(repeats):
        for j in range(r):
            due[int((j + 0.5) * P / r)].append(i)
    return due


def sweep_with_skips(
    step_fn: Callable[[int, int], float | tuple[float, ...]],
    shapes: Iterable[tuple[int, int]],
    warmup: int = 1,
    repeats: int | Repeats = 3,
    meta: dict | None = None,
    log: Callable[[str], None] | None = None,
    seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(timed rows: SWEEP_COLUMNS, skipped shapes: SKIP_COLUMNS, warm-up rows: WARMUP_COLUMNS),
    each + meta. First a warm-up pass, `warmup` calls per shape in the order given (descending
    memory: the allocator grows once); then round-robin passes (pass_schedule), each visiting the
    shapes due in it once, in an order shuffled per pass (seeded); `repeats` (an int: that many
    for every shape) sets the counts from the warm-up times. Timed rows record their `pass` and
    `order` in it and are returned by shape, then repeat. A ShapeOutOfMemory in any call skips
    the shape (none of its rows is kept)."""
    rep = repeats if isinstance(repeats, Repeats) else Repeats(lo=int(repeats))
    if warmup < 0:
        raise ValueError(f"need warmup >= 0, got {warmup}")
    shapes = [(int(B), int(S)) for B, S in shapes]
    if bad := [bs for bs in shapes if min(bs) < 1]:
        raise ValueError(f"shapes must have B >= 1 and S >= 1, got {bad}")
    if len(set(shapes)) < len(shapes):
        raise ValueError(f"shapes must be distinct, got {shapes}")
    calls: dict[int, list[tuple]] = {i: [] for i in range(len(shapes))}
    skipped: dict[int, str] = {}

    def call(i: int, where: tuple) -> None:
        B, S = shapes[i]
        try:
            out = step_fn(B, S)
        except ShapeOutOfMemory as e:
            skipped[i] = e.reason or str(e)
            if log:
                log(f"shapes: B={B} S={S} skipped: out of device memory")
            return
        out = out if isinstance(out, tuple) else (out,)
        calls[i].append((*(float(v) for v in (*out, math.nan, math.nan)[:3]), *where))

    t0 = time.perf_counter()
    for i in range(len(shapes)):
        for _ in range(warmup):
            if i not in skipped:
                call(i, (-1, i))
    live = [i for i in range(len(shapes)) if i not in skipped]
    # without a warm-up step, every shape is due in every pass (the cost is then unknown)
    warm_s = [calls[i][-1][0] if calls[i] else 1e-9 for i in live]
    counts = rep.counts(warm_s, time.perf_counter() - t0)
    rng = np.random.default_rng(seed)
    for p, due in enumerate(pass_schedule(counts)):
        for k, j in enumerate(rng.permutation(due)):
            if live[j] not in skipped:
                call(live[j], (p, k))
    rows, warm = [], []
    for i, (B, S) in enumerate(shapes):
        if i in skipped:
            continue
        c = calls[i]
        warm += [(B, S, B * S, k, t, m, *o) for k, (t, m, _, *o) in enumerate(c[:warmup])]
        rows += [(B, S, B * S, B * S * S, j, *x) for j, x in enumerate(c[warmup:])]
        if log:
            med = float(np.median([x[0] for x in c[warmup:]]))
            log(f"shapes: B={B} S={S} median {med:.3f} s of {len(c) - warmup}")
    skip = [(*shapes[i], shapes[i][0] * shapes[i][1], r) for i, r in skipped.items()]
    meta = dict(meta or {})
    return (
        _table(rows, SWEEP_COLUMNS, meta, ORDER_COLUMNS),
        _table(skip, SKIP_COLUMNS, meta),
        _table(warm, WARMUP_COLUMNS, meta, ORDER_COLUMNS),
    )


def _table(rows, columns, meta: dict, after: list[str] = ()) -> pd.DataFrame:
    """columns, then the meta columns (one value each), then `after`."""
    df = pd.DataFrame(rows, columns=[*columns, *after])
    for k, v in meta.items():
        df[k] = v
    return df[[*columns, *meta, *after]]


def sweep(step_fn, shapes, warmup: int = 1, repeats: int | Repeats = 3, meta: dict | None = None):
    """The timed rows of `sweep_with_skips` (shapes that ran out of memory are left out)."""
    return sweep_with_skips(step_fn, shapes, warmup, repeats, meta)[0]


def estimate_seconds(
    shapes: Iterable[tuple[int, int]], cost: Callable, warmup: int, repeats: int | Repeats
) -> float:
    """Seconds a sweep takes if each step, warm-up included, costs cost(B, S) (a planning
    estimate, not a result)."""
    rep = repeats if isinstance(repeats, Repeats) else Repeats(lo=int(repeats))
    B, S = (np.array(x, dtype=float) for x in zip(*shapes))
    t = np.asarray(cost(B, S), float)
    return float(warmup * t.sum() + np.asarray(rep.counts(t, warmup * t.sum())) @ t)


def launch_bound(B, S, t, margin: float = LAUNCH_MARGIN) -> pd.DataFrame:
    """Which shapes the host's kernel launches, not the model's work, time: one row per shape
    (B, S, tokens, n, median_s, floor_s, work_s, launch_bound).

    floor_s, the launch floor: the median step of the fastest shape (what launching one step's
    kernels costs when the GPU has next to no work). work_s: what the model's work predicts, the
    form a + c*B + b*B*S + d*B*S^2 fitted to the shapes above the floor (first those >= 2x it,
    then those whose prediction clears it, until the set holds). A shape is launch-bound where
    work_s < margin * floor_s: its GPU work takes less than the host needs to launch it (with a
    margin: a GPU barely ahead of the host still waits on it), so its time measures the host
    (which can be bimodal on a node), not the model. Where the shapes above
    the floor cannot determine the form, shapes under 2x the floor are the launch-bound ones."""
    from suite.balance.costmodel import fit_quadratic_cost

    df = pd.DataFrame({"B": np.asarray(B, int), "S": np.asarray(S, int), "t": np.asarray(t, float)})
    out = df.groupby(["B", "S"])["t"].agg(n="size", median_s="median").reset_index()
    Bs, Ss, med = (out[c].to_numpy(float) for c in ("B", "S", "median_s"))
    floor = float(med.min())
    work, pred = med >= 2 * floor, np.full_like(med, np.nan)
    for _ in range(8):  # a fixed point in 1-2 rounds on the references
        try:
            q = fit_quadratic_cost(Bs[work], Ss[work], med[work], aggregate=False)
        except ValueError:
            pred = np.full_like(med, np.nan)
            break
        pred = q.predict(Bs, Ss)
        new = pred >= margin * floor
        if (new == work).all():
            break
        work = new
    out.insert(2, "tokens", out["B"].astype(np.int64) * out["S"])
    return out.assign(floor_s=floor, work_s=pred, launch_bound=~work)


def fit_rows(B, S, t) -> tuple[np.ndarray, pd.DataFrame]:
    """(which rows the cost fits take, the launch_bound table + `excluded`): every row but those
    of launch-bound shapes, or every row where the rest cannot determine both the power law and
    the quadratic form (then `excluded` is False throughout)."""
    from suite.balance.costmodel import fit_cost, fit_quadratic_cost

    B, S, t = (np.asarray(x, float) for x in (B, S, t))
    lb = launch_bound(B, S, t)
    out = set(zip(lb.loc[lb["launch_bound"], "B"], lb.loc[lb["launch_bound"], "S"]))
    keep = np.array([(b, s) not in out for b, s in zip(B.astype(int), S.astype(int))], bool)
    try:
        fit_cost(B[keep], S[keep], t[keep], loo=False)
        fit_quadratic_cost(B[keep], S[keep], t[keep])
    except (ValueError, RuntimeError):
        keep[:] = True
    return keep, lb.assign(excluded=lb["launch_bound"] & (not keep.all()))


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
