"""The cost model step_time ~ a + b * B * S^p, a memory model, and the budgets derived from them.

Fit: scipy.optimize.curve_fit in normalised units (S / S_max, t / t_max, so b is of order 1),
bounds a >= 0, b >= 0, 0.5 <= p <= 3, initial guess from a grid over p with linear least squares
for (a, b), residuals relative to t (sigma = t) because step times span decades. Reported: the 95%
CI of each parameter (t-distribution on the covariance), R^2 on the raw times, and the
leave-one-bucket-out error (mean over buckets of the mean |relative error| of the held-out bucket).

Memory: peak_bytes ~ m0 + m1 * B * S by linear least squares. Budgets: with device capacity C and
safety margin f (default 10%), M_mem = (C * (1 - f) - m0) / m1 tokens; M_comp = M_mem * s_cross^(p-1)
so the two constraints cross at s_cross (chosen from data, see simulator.tune_s_cross).

QuadraticCost: the physical form a + c*B + b*B*S + d*B*S^2 (fixed per step, per sample, linear
token work such as projections and FFN, quadratic attention work), fitted by non-negative least
squares on relative residuals with scaled columns (fit_quadratic_cost); loo_error_quadratic is its
leave-one-bucket-out error over the same folds as loo_error. One power law has neither
the per-sample term nor separate linear and quadratic parts, so it misfits short-sequence
large-B and long-sequence small-B batches at once
(reports/reference/h200/quick-5753865/validation/README.md).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import optimize, stats

P_BOUNDS = (0.5, 3.0)
DEFAULT_SAFETY = 0.10


@dataclass(frozen=True)
class CostModel:
    """step_time = a + b * B * S^p (seconds), with optional memory model and budgets."""

    a: float
    b: float
    p: float
    p_ci: tuple[float, float] = (math.nan, math.nan)
    a_ci: tuple[float, float] = (math.nan, math.nan)
    b_ci: tuple[float, float] = (math.nan, math.nan)
    r2: float = math.nan
    loo_err: float = math.nan
    n: int = 0
    p_fixed: bool = False
    m0: float = math.nan  # memory model: peak bytes = m0 + m1 * B * S
    m1: float = math.nan
    mem_r2: float = math.nan
    capacity_bytes: float = math.nan
    safety: float = DEFAULT_SAFETY
    m_mem: float = math.nan  # tokens per batch (memory budget)
    m_comp: float = math.nan  # B * S^p budget
    s_cross: float = math.nan
    source: str = ""
    # the physical form fitted beside it (QuadraticCost fields a, c, b, d, ...), or None: what
    # the simulator steps with (step_model) while the policies keep p and the budgets above
    quadratic: dict | None = None
    # seconds of a step paid once whatever its micro-batches (the optimizer), where the sweep timed
    # it apart: the quadratic then prices a micro-batch without it (the power law keeps whole
    # steps, as the claims fit it); the simulator adds it once per step (SimConfig.optimizer_s)
    optimizer_s: float = 0.0

    @property
    def fixed_s(self) -> float:
        """The part of a step that does not scale with the batch (noise does not apply to it)."""
        return self.a

    def step_model(self):
        """What simulated steps cost: the quadratic form where the JSON carries one (it predicts
        measured training steps better than the power law), else this power law."""
        if not self.quadratic:
            return self
        q = self.quadratic
        return QuadraticCost(
            a=q["a"], c=q["c"], b=q["b"], d=q["d"], floor_s=q.get("floor_s") or 0.0,
            source=q.get("source") or "quadratic",
        )  # fmt: skip

    def with_quadratic(self, q: QuadraticCost | None) -> CostModel:
        if q is None:
            return replace(self, quadratic=None)
        keep = {"a": q.a, "c": q.c, "b": q.b, "d": q.d, "floor_s": q.floor_s, "r2": q.r2}
        keep |= {"n": q.n, "source": q.source}
        return replace(self, quadratic={k: _finite_or_none(v) for k, v in keep.items()})

    def predict(self, B, S) -> np.ndarray:
        return self.a + self.b * np.asarray(B, float) * np.asarray(S, float) ** self.p

    def sample_cost(self, S) -> np.ndarray:
        """Per-sample variable cost b * S^p (what a partitioner balances)."""
        return self.b * np.asarray(S, float) ** self.p

    def with_budgets(self, m_mem: float, s_cross: float) -> CostModel:
        return replace(
            self,
            m_mem=float(m_mem),
            s_cross=float(s_cross),
            m_comp=float(m_mem * s_cross ** (self.p - 1)),
        )

    def to_json(self) -> dict:
        """Plain JSON (non-finite floats, also inside the CI pairs, become null)."""

        def clean(v):
            if isinstance(v, (tuple, list)):
                return [clean(x) for x in v]
            return None if isinstance(v, float) and not math.isfinite(v) else v

        return {k: clean(v) for k, v in asdict(self).items()}

    def save(self, path: str | Path) -> None:
        from suite.rundir import write_json

        write_json(Path(path), self.to_json())

    @classmethod
    def from_json(cls, obj: dict) -> CostModel:
        if not isinstance(obj, dict):
            raise ValueError(f"a cost JSON is one object, got {type(obj).__name__}")
        known = cls.__dataclass_fields__
        unknown = set(obj) - set(known)
        if unknown or not {"a", "b", "p"} <= set(obj):
            raise ValueError(
                f"cost JSON needs a, b, p (and only CostModel fields), got {sorted(obj)}"
            )
        _check_fields(obj)
        kw = {}
        for k, v in obj.items():
            if k == "quadratic":
                if v is not None and not (isinstance(v, dict) and {"a", "c", "b", "d"} <= set(v)):
                    raise ValueError(f"cost JSON's quadratic needs a, c, b, d, got {v!r}")
                kw[k] = v
                continue
            if v is None:
                v = math.nan
            if k.endswith("_ci"):
                v = tuple(math.nan if x is None else float(x) for x in v)
            kw[k] = v
        return cls(**kw)

    @classmethod
    def load(cls, path: str | Path) -> CostModel:
        """from_json of the file; every error names the file (and the field's line)."""
        try:
            text = Path(path).read_text(encoding="utf-8")
            obj = json.loads(text)
        except (OSError, ValueError) as e:  # JSONDecodeError, UnicodeDecodeError
            raise ValueError(f"{path}: cannot read a cost JSON ({e})") from None
        try:
            return cls.from_json(obj)
        except CostFieldError as e:
            line = 0  # the field's line: each key of its path ("quadratic.d") after the last
            for key in e.field.split("."):
                lines = text.splitlines()[line:]
                line += next((i for i, ln in enumerate(lines, 1) if f'"{key}"' in ln), 0)
            raise ValueError(f"{path}{f':{line}' if line else ''}: {e}") from None
        except (ValueError, TypeError) as e:
            raise ValueError(f"{path}: {e}") from None


class CostFieldError(ValueError):
    """A cost JSON field that is missing, of the wrong type or out of range; names the field."""

    def __init__(self, field: str, msg: str):
        super().__init__(f"{field} {msg}")
        self.field = field


# What each number of a cost JSON may be: (lowest, highest, lowest excluded); null is allowed
# where the writer writes it (a non-finite value: not measured), never for a, b, p. NaN and
# infinity are never accepted: the writer writes null for them, so a NaN is a broken file.
_RANGES = {
    "a": (0.0, math.inf, False),
    "b": (0.0, math.inf, False),
    "p": (*P_BOUNDS, False),
    "r2": (-math.inf, 1.0, False),
    "loo_err": (0.0, math.inf, False),
    "m0": (-math.inf, math.inf, False),
    "m1": (0.0, math.inf, True),
    "mem_r2": (-math.inf, 1.0, False),
    "capacity_bytes": (0.0, math.inf, True),
    "safety": (0.0, 1.0, False),
    "m_mem": (1.0, math.inf, False),
    "m_comp": (0.0, math.inf, True),
    "s_cross": (1.0, math.inf, False),
    "optimizer_s": (0.0, math.inf, False),
}
_QUADRATIC = {"a": 0.0, "c": 0.0, "b": 0.0, "d": 0.0, "floor_s": 0.0}  # each >= this
_REQUIRED = ("a", "b", "p")


def _number(field: str, v, lo: float, hi: float, open_lo: bool, null: bool) -> None:
    if v is None and null:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise CostFieldError(field, f"must be a number, got {v!r}")
    if not math.isfinite(v):
        raise CostFieldError(field, f"must be a finite number, got {v!r}")
    if v < lo or v > hi or (open_lo and v == lo):
        span = f"{'>' if open_lo else '>='} {lo:g}" + (f" and <= {hi:g}" if hi < math.inf else "")
        raise CostFieldError(field, f"must be {span}, got {v!r}")


def _check_fields(obj: dict) -> None:
    """Refuse a cost JSON whose numbers the models cannot use (CostFieldError naming the field)."""
    for k, (lo, hi, open_lo) in _RANGES.items():
        if k in obj:
            _number(k, obj[k], lo, hi, open_lo, null=k not in _REQUIRED)
    for k in ("p_ci", "a_ci", "b_ci"):
        v = obj.get(k)
        if v is not None and not (isinstance(v, list) and len(v) == 2):
            raise CostFieldError(k, f"must be a pair [low, high], got {v!r}")
        for x in v or ():
            _number(k, x, -math.inf, math.inf, False, null=True)
    if "n" in obj and (isinstance(obj["n"], bool) or not isinstance(obj["n"], int) or obj["n"] < 0):
        raise CostFieldError("n", f"must be a whole number >= 0, got {obj['n']!r}")
    q = obj.get("quadratic")
    if isinstance(q, dict):
        for k, lo in _QUADRATIC.items():
            if k in q:
                _number(f"quadratic.{k}", q[k], lo, math.inf, False, null=k == "floor_s")


def _finite_or_none(v):
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _model(x, a, b, p):
    B, S = x
    return a + b * B * S**p


def _initial_guess(B, S, t, p_fixed):
    best = None
    for p in [p_fixed] if p_fixed is not None else np.linspace(0.75, 2.75, 9):
        X = np.column_stack([np.ones_like(t), B * S**p]) / t[:, None]
        (a, b), *_ = np.linalg.lstsq(X, np.ones_like(t), rcond=None)
        a, b = max(a, 0.0), max(b, 1e-9)
        err = np.sum(((a + b * B * S**p) / t - 1) ** 2)
        if best is None or err < best[0]:
            best = (err, a, b, p)
    return best[1:]


def _fit_norm(B, S, t, p_fixed=None, a_fixed=None):
    """(params, cov) in normalised units; params = (a, b, p). a_fixed (normalised) pins the
    intercept: only b (and p) are fitted, and a's row and column of cov are 0."""
    a0, b0, p0 = _initial_guess(B, S, t, p_fixed)
    free = [a_fixed is None, True, p_fixed is None]  # which of (a, b, p) the fit moves

    def f(x, *v):
        it = iter(v)
        a, b, p = (next(it) if on else fix for on, fix in zip(free, (a_fixed, None, p_fixed)))
        return _model(x, a, b, p)

    lo, hi = [0, 0, P_BOUNDS[0]], [np.inf, np.inf, P_BOUNDS[1]]
    x0 = [a0, b0, min(max(p0, P_BOUNDS[0]), P_BOUNDS[1])]
    pick = [i for i in range(3) if free[i]]
    bounds = ([lo[i] for i in pick], [hi[i] for i in pick])
    x0 = [min(max(x0[i], lo[i] + 1e-12), hi[i]) for i in pick]
    popt, pcov = optimize.curve_fit(f, (B, S), t, p0=x0, bounds=bounds, sigma=t, maxfev=20000)
    full, cov = np.array([a_fixed or 0.0, 0.0, p_fixed or 0.0]), np.zeros((3, 3))
    full[pick] = popt
    cov[np.ix_(pick, pick)] = pcov
    return full, cov


def median_per_shape(B, S, t) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B, S, median t) per distinct (B, S): repeated timings collapse to their median, so one
    slow outlier (a page fault, a neighbour's burst) does not drag the fit."""
    B, S, t = (np.asarray(x, dtype=float) for x in (B, S, t))
    keys, inv = np.unique(np.column_stack([B, S]), axis=0, return_inverse=True)
    med = np.array([np.median(t[inv.ravel() == k]) for k in range(len(keys))])
    return keys[:, 0], keys[:, 1], med


def fit_cost(
    B,
    S,
    t,
    p: float | None = None,
    source: str = "",
    aggregate: bool = True,
    loo: bool = True,
    a: float | None = None,
) -> CostModel:
    """Fit step_time ~ a + b * B * S^p (p free unless given; a free unless given, in seconds: a
    known fixed cost, so the intercept cannot absorb the power law's misfit). Needs >= 4 shapes
    over >= 3 distinct S.

    aggregate=True fits (and reports R^2 and n over) the per-shape medians of repeated timings.
    loo=False leaves loo_err NaN (a bootstrap refit needs only the parameters).
    """
    B, S, t = (np.asarray(x, dtype=float) for x in (B, S, t))
    if not (B.shape == S.shape == t.shape) or B.ndim != 1:
        raise ValueError(f"B, S, t must be 1-D of one length, got {B.shape}, {S.shape}, {t.shape}")
    if aggregate:
        B, S, t = median_per_shape(B, S, t)
    if len(t) < 4 or len(np.unique(S)) < 3:
        raise ValueError(
            f"need >= 4 measurements over >= 3 sequence lengths, got {len(t)} "
            f"over {len(np.unique(S))}"
        )
    if (t <= 0).any() or (B < 1).any() or (S < 1).any():
        raise ValueError("step times must be > 0 and B, S >= 1")
    s_ref, t_ref = S.max(), t.max()
    popt, pcov = _fit_norm(B, S / s_ref, t / t_ref, p, None if a is None else a / t_ref)
    a_n, b_n, p_hat = popt
    q = stats.t.ppf(0.975, max(len(t) - 1 - (p is None) - (a is None), 1))
    se = np.sqrt(np.clip(np.diag(pcov), 0, None))

    def ci(i, scale, v):
        if p is not None and i == 2:
            return (p_hat, p_hat)
        return (float((v - q * se[i]) * scale), float((v + q * se[i]) * scale))

    b_scale = t_ref / s_ref**p_hat
    model = CostModel(
        a=float(a_n * t_ref),
        b=float(b_n * b_scale),
        p=float(p_hat),
        a_ci=ci(0, t_ref, a_n),
        b_ci=ci(1, b_scale, b_n),
        p_ci=ci(2, 1.0, p_hat),
        n=len(t),
        p_fixed=p is not None,
        source=source,
    )
    pred = model.predict(B, S)
    r2 = 1 - np.sum((t - pred) ** 2) / np.sum((t - t.mean()) ** 2)
    return replace(model, r2=float(r2), loo_err=loo_error(B, S, t, p, a=a) if loo else math.nan)


def _leave_one_bucket_out(B, S, t, fit_predict, aggregate: bool) -> float:
    """Mean over buckets (sequence lengths) of the held-out bucket's mean |relative error|, with
    fit_predict(B, S, t, B_held, S_held) refitting on the other buckets (a fold whose refit
    raises RuntimeError or ValueError, or with < 3 other lengths or < 4 other shapes, is skipped)."""
    B, S, t = (np.asarray(x, dtype=float) for x in (B, S, t))
    if aggregate:
        B, S, t = median_per_shape(B, S, t)
    errs = []
    for s in np.unique(S):
        held = S == s
        if len(np.unique(S[~held])) < 3 or (~held).sum() < 4:
            continue
        try:
            pred = fit_predict(B[~held], S[~held], t[~held], B[held], S[held])
        except (RuntimeError, ValueError):
            continue
        errs.append(np.mean(np.abs(pred / t[held] - 1)))
    return float(np.mean(errs)) if errs else math.nan


def loo_error(
    B, S, t, p: float | None = None, aggregate: bool = True, a: float | None = None
) -> float:
    """Leave-one-bucket-out: mean over buckets of the held-out bucket's mean |relative error|
    (p and a pinned where given, as fit_cost pins them)."""

    def fit_predict(Bf, Sf, tf, Bh, Sh):
        s_ref, t_ref = Sf.max(), tf.max()
        a_n = None if a is None else a / t_ref
        (an, b, pp), _ = _fit_norm(Bf, Sf / s_ref, tf / t_ref, p, a_n)
        return t_ref * (an + b * Bh * (Sh / s_ref) ** pp)

    return _leave_one_bucket_out(B, S, t, fit_predict, aggregate)


@dataclass(frozen=True)
class QuadraticCost:
    """step_time = a + c*B + b*B*S + d*B*S^2 (seconds): fixed, per-sample, linear and quadratic
    token terms, and no less than floor_s, the launch floor (a step whose GPU work is shorter
    than launching its kernels takes the launch time; suite.balance.shapebench.launch_bound).
    The same cost interface as CostModel: predict(B, S) and fixed_s (= a)."""

    a: float
    c: float
    b: float
    d: float
    floor_s: float = 0.0
    r2: float = math.nan
    resid_cv: float = math.nan  # RMS of predicted / measured - 1 over the fitted shapes
    n: int = 0
    source: str = ""

    @property
    def fixed_s(self) -> float:
        return self.a

    def sample_cost(self, S) -> np.ndarray:
        """Per-sample variable cost c + b*S + d*S^2."""
        S = np.asarray(S, float)
        return self.c + self.b * S + self.d * S**2

    def predict(self, B, S) -> np.ndarray:
        return np.maximum(self.floor_s, self.a + np.asarray(B, float) * self.sample_cost(S))


def fit_quadratic_cost(B, S, t, source: str = "", aggregate: bool = True) -> QuadraticCost:
    """Fit step_time ~ a + c*B + b*B*S + d*B*S^2 with all four coefficients >= 0.

    scipy.optimize.nnls on the relative residuals (rows divided by t, as fit_cost weights them,
    since step times span decades), each column scaled to unit norm so that the solve is well
    conditioned (1 and B*S^2 differ by ~10 decades). aggregate=True fits the per-shape medians of
    repeated timings. Needs >= 4 distinct shapes over >= 3 sequence lengths, finite times > 0.
    """
    B, S, t = (np.asarray(x, dtype=float) for x in (B, S, t))
    if not (B.shape == S.shape == t.shape) or B.ndim != 1:
        raise ValueError(f"B, S, t must be 1-D of one length, got {B.shape}, {S.shape}, {t.shape}")
    if not (np.isfinite(B).all() and np.isfinite(S).all() and np.isfinite(t).all()):
        raise ValueError("B, S and step times must be finite (got NaN or inf)")
    if (t <= 0).any() or (B < 1).any() or (S < 1).any():
        raise ValueError("step times must be > 0 and B, S >= 1")
    if aggregate:
        B, S, t = median_per_shape(B, S, t)
    shapes = len(np.unique(np.column_stack([B, S]), axis=0))
    if shapes < 4 or len(np.unique(S)) < 3:
        raise ValueError(
            f"the quadratic cost fit needs >= 4 distinct (B, S) shapes over >= 3 sequence "
            f"lengths, got {shapes} over {len(np.unique(S))}"
        )
    X = np.column_stack([np.ones_like(B), B, B * S, B * S**2]) / t[:, None]
    scale = np.linalg.norm(X, axis=0)
    Xs = X / scale
    if np.linalg.matrix_rank(Xs) < 4:
        raise ValueError("the shapes do not determine a, c, b, d (B does not vary enough)")
    coef, _ = optimize.nnls(Xs, np.ones_like(t))
    a, c, b, d = (float(v) for v in coef / scale)
    model = QuadraticCost(a=a, c=c, b=b, d=d, n=len(t), source=source)
    pred = model.predict(B, S)
    ss = np.sum((t - t.mean()) ** 2)
    r2 = 1 - np.sum((t - pred) ** 2) / ss if ss > 0 else math.nan
    resid = float(np.sqrt(np.mean((pred / t - 1) ** 2)))
    return replace(model, r2=float(r2), resid_cv=resid)


def loo_error_quadratic(B, S, t, aggregate: bool = True) -> float:
    """loo_error for the quadratic form (the same folds, skips and aggregation, so the two
    compare); a fold whose shapes do not separate the terms is skipped (ValueError)."""

    def fit_predict(Bf, Sf, tf, Bh, Sh):
        return fit_quadratic_cost(Bf, Sf, tf, aggregate=False).predict(Bh, Sh)

    return _leave_one_bucket_out(B, S, t, fit_predict, aggregate)


def fit_memory(B, S, peak_bytes) -> tuple[float, float, float]:
    """(m0, m1, R^2) of peak_bytes ~ m0 + m1 * B * S, by least squares."""
    x = np.asarray(B, float) * np.asarray(S, float)
    y = np.asarray(peak_bytes, float)
    ok = np.isfinite(y) & (y > 0)
    if ok.sum() < 2 or len(np.unique(x[ok])) < 2:
        raise ValueError("the memory fit needs >= 2 positive peak-memory rows at distinct B*S")
    m1, m0 = np.polyfit(x[ok], y[ok], 1)
    pred = m0 + m1 * x[ok]
    r2 = 1 - np.sum((y[ok] - pred) ** 2) / max(np.sum((y[ok] - y[ok].mean()) ** 2), 1e-300)
    return float(m0), float(m1), float(r2)


def memory_budget(
    m0: float, m1: float, capacity_bytes: float, safety: float = DEFAULT_SAFETY
) -> float:
    """M_mem in tokens per batch: the largest B*S whose predicted peak fits C * (1 - safety)."""
    if not 0 <= safety < 1:
        raise ValueError(f"safety margin must be in [0, 1), got {safety}")
    if m1 <= 0:
        raise ValueError(f"memory slope m1 must be > 0 bytes/token, got {m1}")
    m_mem = (capacity_bytes * (1 - safety) - m0) / m1
    if m_mem < 1:
        raise ValueError(
            f"capacity {capacity_bytes:.3g} B with {safety:.0%} margin leaves no room "
            f"for one token above the fixed {m0:.3g} B"
        )
    return float(m_mem)


# Default analytic model, used when no measured cost JSON is given: Wan 2.1 14B widths (D = 5120,
# 40 layers), fwd+bwd FLOPs per sample 84e9*S (linear layers, 6 * 14e9) + 3.5e6*S^2 (attention,
# equal to the linear part near S = 24K as in BALANCING.md), at 4e14 FLOP/s (about 40% of an
# H200's bf16 peak), plus 0.3 s fixed per step. Memory (FSDP over 16 ranks, full activation
# checkpointing): 25 GB fixed (sharded model states + one layer's recompute) + 0.45 MB per token
# (40 layers of saved bf16 inputs plus attention/FFN workspace), on a 141 GB H200 with a 10% margin:
# M_mem = (141e9 * 0.9 - 25e9) / 0.45e6 = about 226,000 tokens (three 720p 81-frame videos).
WAN14B_FLOPS = (84e9, 3.5e6)
WAN14B_FLOPS_PER_S = 4e14
WAN14B_FIXED_S = 0.3
WAN14B_MEMORY = (25e9, 0.45e6)  # m0 bytes, m1 bytes per token
H200_BYTES = 141e9
WAN14B_M_MEM = int(memory_budget(*WAN14B_MEMORY, H200_BYTES, DEFAULT_SAFETY))


ANALYTIC_SOURCE = (
    "analytic Wan-14B on H200 (suite.balance.costmodel: 0.3 s fixed + (84e9*S + 3.5e6*S^2) "
    "FLOPs per sample at 4e14 FLOP/s; no measured run)"
)


def analytic_seconds(B, S) -> np.ndarray:
    """The analytic Wan-14B-on-H200 step time (seconds) of a batch of B samples of S tokens."""
    return analytic_cost().predict(B, S)


def analytic_cost() -> QuadraticCost:
    """The analytic model in the physical form, term by term: fixed 0.3 s, no per-sample term,
    linear-layer and attention FLOPs at 4e14 FLOP/s."""
    lin, att = WAN14B_FLOPS
    f = WAN14B_FLOPS_PER_S
    return QuadraticCost(a=WAN14B_FIXED_S, c=0.0, b=lin / f, d=att / f, source=ANALYTIC_SOURCE)


def analytic_sweep() -> pd.DataFrame:
    """The analytic model's step times over Wan's sequence lengths, two batch sizes each (B, S,
    step_s): what the default's power law is fitted to."""
    S = np.repeat(np.array([1560, 3600, 7800, 14040, 20280, 32760, 46800, 75600], float), 2)
    B = np.maximum(1, np.floor(np.maximum(1, np.floor(WAN14B_M_MEM / S)) / np.tile([1, 2], 8)))
    return pd.DataFrame({"B": B.astype(int), "S": S.astype(int), "step_s": analytic_seconds(B, S)})


def default_cost_model(pin_fixed: bool = True) -> CostModel:
    """The default cost (no --cost): the analytic Wan-14B model with physical terms. Steps are
    costed by it exactly (its physical form, the `quadratic` the simulator steps with); the
    policies' exponent p and planner b*S^p come from a power law fitted to it over Wan's
    sequence lengths with the intercept pinned to the model's fixed cost (left free, the
    intercept absorbs the power law's misfit: about 6 s, 20 times the real 0.3 s, which the
    simulator would charge once per micro-batch). pin_fixed=False leaves it free: the planners'
    power law a least-squares fit, the steps still costed exactly (what the tests compare the
    default's recommendation with)."""
    sw = analytic_sweep()
    a = WAN14B_FIXED_S if pin_fixed else None
    fit = fit_cost(sw["B"], sw["S"], sw["step_s"], source=ANALYTIC_SOURCE, a=a)
    m0, m1 = WAN14B_MEMORY
    fit = replace(fit, m_mem=float(WAN14B_M_MEM), m0=m0, m1=m1, capacity_bytes=H200_BYTES)
    return fit.with_quadratic(analytic_cost())
