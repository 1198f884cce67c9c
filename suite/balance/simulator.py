"""Cluster simulator: R synchronous data-parallel ranks for N steps of a policy's Plan.

Every policy yields a Plan (suite.balance.plan: per step, per rank, micro-batches of one sequence
length, or varlen packs). `simulate_plan` costs it without running it (`micro_batch_seconds`): a
micro-batch of B samples of length S costs `cost.predict(B, S)` (a fitted step model, or a
measured LatencyTable where it has the shape); a varlen pack of mixed lengths costs one fixed
cost plus each sample's own variable cost, fixed_s + sum_i sample_cost(S_i) (a + b*sum S_i^p
for the power law, a + sum (c + b*S_i + d*S_i^2) for the physical form, no less than its launch
floor), which is predict(B, S) where the lengths are equal. Its
variable part times the mean of B per-sample Gamma factors with mean 1 and CV `noise_cv` (the mean
of B such factors is exactly Gamma(B / cv^2, cv^2 / B), so it is drawn once per micro-batch:
`noisy`; its optional rank-level factor is used by the trace validation, not here); a rank's
compute is the sum of its micro-batches; step time = max over ranks + collective + optimizer.
`simulate(data, policy, cost, cfg)` builds the plan with `plan_steps` (timed: planner_ms) and
costs it, the same path for every policy. `data` is a corpus (sample lengths) or a bucket table
(S, share), from which a corpus is drawn (`draw_corpus`, seeded by cfg.seed only, so every policy
of one seed plans over the same samples: common random numbers).

Metrics (see BALANCING.md), over steps:
    rank_cv, rank_cv_p99    per-step std/mean of rank compute (population std): mean, 99th pct
    maxmean, maxmean_p99    per-step max/mean of rank compute: mean, 99th percentile
    bubble       per-step 1 - mean/max (= the imbalance rate (max - mean)/max), averaged
    step_cv      std/mean of step time across steps
    step_cv_per_token  std/mean across steps of step time per latent token
    throughput   latent tokens (no padding) of all ranks / total time, tokens/s
    floor_p5     5th percentile over steps of the step's tokens / step time
    planner_ms   wall time to build the plan per step (this machine, one core)

Timing it: `time_simulator` (benchmarks/bench_balance.py tracks it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

NOISE_CV = 0.05  # per-sample compute CV assumed where no repeated measurement gives one


@dataclass(frozen=True)
class SimConfig:
    ranks: int = 16
    steps: int = 1000
    noise_cv: float = 0.05  # per-sample CV of a sample's compute around the cost model
    collective_s: float = 0.0  # non-overlapped gradient all-reduce / FSDP collectives per step
    optimizer_s: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.steps < 1:
            raise ValueError(f"ranks and steps must be >= 1, got {self.ranks}, {self.steps}")
        if self.noise_cv < 0:
            raise ValueError(f"noise_cv must be >= 0, got {self.noise_cv}")


class LatencyTable:
    """A measured per-shape latency table (columns B, S, step_s) used as a cost model.

    predict(B, S) returns the median measured step time of that exact (B, S); shapes the table
    lacks come from `fallback` (a fitted model with predict and fixed_s) where one is given, else
    raise KeyError naming them (measure the buckets you simulate).
    """

    def __init__(self, table: pd.DataFrame, fallback=None) -> None:
        missing = {"B", "S", "step_s"} - set(table.columns)
        if missing:
            raise ValueError(f"latency table lacks columns {sorted(missing)}; needs B, S, step_s")
        med = table.groupby(["B", "S"])["step_s"].median()
        self._keys = np.array([int(b) * 2**32 + int(s) for b, s in med.index], dtype=np.int64)
        order = np.argsort(self._keys)
        self._keys, self._vals = self._keys[order], med.to_numpy(float)[order]
        self.fallback = fallback
        self.fixed_s = float(fallback.fixed_s) if fallback is not None else 0.0

    def predict(self, B, S) -> np.ndarray:
        B, S = np.broadcast_arrays(np.asarray(B, np.int64), np.asarray(S, np.int64))
        k = B * 2**32 + S
        i = np.clip(np.searchsorted(self._keys, k), 0, len(self._keys) - 1)
        miss = self._keys[i] != k
        out = self._vals[i].astype(float)
        if miss.any():
            if self.fallback is None:
                j = np.flatnonzero(miss.ravel())[0]
                raise KeyError(
                    f"latency table has no measurement for B={B.ravel()[j]}, S={S.ravel()[j]}"
                )
            out[miss] = np.asarray(self.fallback.predict(B[miss], S[miss]), float)
        return out

    def sample_cost(self, S) -> np.ndarray:
        """A sample's variable cost inside a varlen pack: the fallback's (a table times whole
        shapes, not samples)."""
        if self.fallback is None:
            raise KeyError("a latency table without a fallback model cannot price a varlen pack")
        return self.fallback.sample_cost(S)


def micro_batch_seconds(plan, tokens, cost) -> np.ndarray:
    """Each micro-batch's noise-free seconds under `cost` (module doc): cost.predict(B, S) for
    one length, fixed_s + the sum of its samples' sample_cost (at least the cost's floor_s) for
    a varlen pack of mixed lengths."""
    tokens = np.asarray(tokens, np.int64)
    B, S, _ = plan.lengths(tokens)
    mixed = S == 0
    out = np.zeros(len(B))
    if (~mixed).any():
        out[~mixed] = np.asarray(cost.predict(B[~mixed], S[~mixed]), float)
    if mixed.any():
        per = np.asarray(cost.sample_cost(tokens[plan.samples]), float)
        sums = np.add.reduceat(per, plan.mb_start[:-1])[mixed]
        floor = float(getattr(cost, "floor_s", 0.0) or 0.0)
        out[mixed] = np.maximum(floor, float(cost.fixed_s) + sums)
    return out


@dataclass
class SimResult:
    policy: str
    ranks: int
    S: np.ndarray  # (steps, ranks) sequence length of each rank's batches (0: mixed, or none)
    B: np.ndarray  # (steps, ranks) samples per rank
    tokens: np.ndarray  # (steps, ranks) latent tokens per rank
    compute: np.ndarray  # (steps, ranks) seconds
    step_s: np.ndarray  # (steps,) synchronous step time
    extra: dict | None = None

    def metrics(self) -> dict[str, float]:
        c = self.compute
        mean, mx = c.mean(axis=1), c.max(axis=1)
        cv, mm = c.std(axis=1) / mean, mx / mean
        step_tokens = self.tokens.sum(axis=1)
        per_tok = self.step_s / step_tokens
        out = {
            "rank_cv": float(np.mean(cv)),
            "rank_cv_p99": float(np.percentile(cv, 99)),
            "maxmean": float(np.mean(mm)),
            "maxmean_p99": float(np.percentile(mm, 99)),
            "bubble": float(np.mean(1 - mean / mx)),
            "step_cv": float(self.step_s.std() / self.step_s.mean()),
            "step_cv_per_token": float(per_tok.std() / per_tok.mean()),
            "throughput": float(step_tokens.sum() / self.step_s.sum()),
            "floor_p5": float(np.percentile(step_tokens / self.step_s, 5)),
            "step_s_mean": float(self.step_s.mean()),
            "planner_ms": float("nan"),
        }
        out.update(self.extra or {})
        return out

    def rank_frame(self) -> pd.DataFrame:
        """Long table: one row per (step, rank)."""
        steps, ranks = self.compute.shape
        return pd.DataFrame(
            {
                "policy": self.policy,
                "ranks": self.ranks,
                "step": np.repeat(np.arange(steps), ranks),
                "rank": np.tile(np.arange(ranks), steps),
                "S": self.S.ravel(),
                "B": self.B.ravel(),
                "tokens": self.tokens.ravel(),
                "compute_s": self.compute.ravel(),
            }
        )

    def step_frame(self) -> pd.DataFrame:
        """Long table: one row per step."""
        c = self.compute
        return pd.DataFrame(
            {
                "policy": self.policy,
                "ranks": self.ranks,
                "step": np.arange(len(self.step_s)),
                "step_s": self.step_s,
                "tokens": self.tokens.sum(axis=1),
                "max_s": c.max(axis=1),
                "mean_s": c.mean(axis=1),
                "rank_cv": c.std(axis=1) / c.mean(axis=1),
            }
        )


def noisy(
    rng: np.random.Generator,
    base: np.ndarray,
    fixed: float,
    n: np.ndarray,
    cv: float,
    rank_noise_cv: float = 0.0,
):
    """fixed + (base - fixed) x mean of n per-sample Gamma(mean 1, CV cv) factors, then, if
    rank_noise_cv > 0, the whole result x one Gamma(mean 1, CV rank_noise_cv) factor per element
    (per rank batch; not the `rank_cv` metric, which is the spread across ranks).

    The rank factor scales the whole compute: it models timing jitter of a rank (clocks,
    contention, launch gaps), which slows its fixed part as much as its per-sample work.
    With rank_noise_cv == 0 nothing extra is drawn: the random stream is the one without the term.
    """
    out = base
    if cv != 0:
        n = np.maximum(np.asarray(n, float), 1)
        g = rng.gamma(n / cv**2, cv**2 / n)
        out = fixed + (base - fixed) * g
    if rank_noise_cv > 0:
        out = out * rng.gamma(1 / rank_noise_cv**2, rank_noise_cv**2, np.shape(out))
    return out


def simulate_plan(plan, tokens, cost, cfg: SimConfig, extra: dict | None = None) -> SimResult:
    """Cost `plan` (over the corpus `tokens`) with `cost` (predict(B, S), fixed_s): the module
    doc's step model. The noise is drawn from (cfg.seed, plan.world), one factor per
    micro-batch, so a plan's result is deterministic per seed."""
    tokens = np.asarray(tokens, np.int64)
    B, S, tok = plan.lengths(tokens)
    base = micro_batch_seconds(plan, tokens, cost)
    rng = np.random.default_rng([cfg.seed, plan.world, 1])
    mb = noisy(rng, base, float(cost.fixed_s), B, cfg.noise_cv)  # a pack: B factors' mean too
    compute = plan.rank_sums(mb)
    n_b = plan.rank_sums(B).astype(np.int64)
    toks = plan.rank_sums(tok).astype(np.int64)
    one_s = np.zeros(plan.steps * plan.world, np.int64)  # the rank's one length, 0 if mixed
    if plan.n_micro:
        key = plan.mb_step * plan.world + plan.mb_rank
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        hi, lo = np.maximum.reduceat(S, starts), np.minimum.reduceat(S, starts)
        one_s[key[starts]] = np.where(hi == lo, hi, 0)  # a mixed pack's S is 0 already
    step_s = compute.max(axis=1) + cfg.collective_s + cfg.optimizer_s
    return SimResult(
        plan.policy, plan.world, one_s.reshape(compute.shape), n_b, toks, compute, step_s, extra
    )


CORPUS_CAP = 4_000_000  # samples drawn from a bucket table at most; longer runs chain epochs


def draw_corpus(buckets: pd.DataFrame, n: int, seed: int) -> np.ndarray:
    """n sample lengths drawn i.i.d. from a bucket table (S, share), seeded by `seed` alone."""
    share = buckets["share"].to_numpy(float)
    if len(share) == 0 or (share < 0).any() or share.sum() <= 0:
        raise ValueError("the bucket table needs rows with shares >= 0 summing to > 0")
    cdf = np.cumsum(share / share.sum())
    k = np.searchsorted(cdf, np.random.default_rng([seed, 0xC0]).random(n), side="right")
    return buckets["S"].to_numpy(np.int64)[np.minimum(k, len(cdf) - 1)]


def corpus_size(buckets: pd.DataFrame, cfg: SimConfig, per_rank_step: float) -> int:
    """Samples to draw: enough for cfg.steps x cfg.ranks rank-steps of `per_rank_step` samples
    (so a run never repeats a sample), at most CORPUS_CAP (then epochs chain, reshuffled), at
    least 8 full steps."""
    need = cfg.steps * cfg.ranks * per_rank_step * 1.1
    return int(max(min(need, CORPUS_CAP), 8 * cfg.ranks * per_rank_step, 64))


def auto_steps(buckets: pd.DataFrame, m_mem: float, ranks: int) -> int:
    """Steps for a forecast: as many as one corpus draw (CORPUS_CAP samples) holds when every
    rank packs M_mem tokens a step, within [AUTO_STEPS_MIN, AUTO_STEPS_MAX]. Up to ~90 ranks of a
    video mix that is 1000; beyond, fewer steps of more ranks each (every metric but step CV is
    a mean over steps of a statistic over ranks, or a ratio of sums over steps and ranks), and
    the planning work stays about that of one corpus instead of growing with R."""
    S, share = buckets["S"].to_numpy(float), buckets["share"].to_numpy(float)
    per_rank = m_mem / float(np.dot(share / share.sum(), S))
    fit = CORPUS_CAP / (1.1 * ranks * per_rank)  # corpus_size's margin
    return int(np.clip(np.floor(fit), AUTO_STEPS_MIN, AUTO_STEPS_MAX))


AUTO_STEPS_MIN, AUTO_STEPS_MAX = 20, 1000


def estimate_seconds(buckets: pd.DataFrame, policy, cfg: SimConfig, probe_steps: int = 2) -> float:
    """About how long `simulate` will take: `probe_steps` steps planned on a corpus of their
    size (the plan is most of the work), scaled to cfg.steps; 0 where the probe cannot plan."""
    from suite.balance.plan import plan_steps

    n = int(max(1.1 * probe_steps * cfg.ranks * samples_per_rank_step(policy, buckets), 64))
    tokens = draw_corpus(buckets, n, cfg.seed + 1)
    t0 = time.perf_counter()
    try:
        plan = plan_steps(policy, tokens, cfg.ranks, probe_steps, cfg.seed)
    except ValueError:
        return 0.0
    return (time.perf_counter() - t0) / plan.steps * cfg.steps


def samples_per_rank_step(policy, buckets: pd.DataFrame) -> float:
    """Expected samples per rank and step: a bucket policy's mean batch size over its batches
    (1 / sum(share / B)); otherwise M_mem / mean S (a packer filling M_mem tokens per rank)."""
    S, share = buckets["S"].to_numpy(float), buckets["share"].to_numpy(float)
    share = share / share.sum()
    if hasattr(policy, "batch_size"):
        return float(1 / np.sum(share / np.asarray(policy.batch_size(S), float)))
    m = getattr(policy, "m_mem", None)
    return float(m / np.dot(share, S)) if m else 64.0


def simulate(data, policy, cost, cfg: SimConfig) -> SimResult:
    """Simulate `policy` (anything with epoch_plan) on `data` with `cost` (predict(B, S),
    fixed_s): the plan of cfg.steps steps over cfg.ranks ranks from plan_steps(seed=cfg.seed),
    costed by simulate_plan. `data`: a corpus's sample lengths, or a bucket table (S, share)
    from which `draw_corpus` draws one (corpus_size)."""
    from suite.balance.plan import plan_steps

    if isinstance(data, pd.DataFrame):
        if not {"S", "share"} <= set(data.columns):
            raise ValueError(
                f"a bucket table needs columns S and share, got {sorted(data.columns)}; pass a "
                "corpus as its array of sample lengths instead"
            )
        n = corpus_size(data, cfg, samples_per_rank_step(policy, data))
        tokens = draw_corpus(data, n, cfg.seed)
    else:
        tokens = np.asarray(data, np.int64)
    t0 = time.perf_counter()
    plan = plan_steps(policy, tokens, cfg.ranks, cfg.steps, cfg.seed)
    planner_ms = 1e3 * (time.perf_counter() - t0) / plan.steps
    res = simulate_plan(plan, tokens, cost, cfg, {"planner_ms": planner_ms})
    res.policy = getattr(policy, "name", type(policy).__name__)
    return res


S_CROSS_GRID = 60  # points of the fine geometric grid dual's s_cross is tuned on


def tune_s_cross(
    buckets: pd.DataFrame,
    cost,
    m_mem: float,
    ranks: int = 16,
    steps: int = 300,
    seed: int = 10_007,
    candidates: int = S_CROSS_GRID,
    p: float | None = None,
    spacing: str = "geometric",
) -> tuple[float, pd.DataFrame]:
    """Choose the dual policy's crossover length s_cross (hence M_comp) by simulated throughput.

    `cost` is the simulator's step model; the policy's exponent is `p` (default cost.p), so the
    rule B*S^p <= M_comp can be tuned on a step model of another form (training: the quadratic
    one, which predicts measured steps better). Candidates: `candidates` points from the
    shortest to the longest bucket, evenly in log S ("geometric", the default: a fine grid that
    sees every tooth of the throughput's sawtooth in s_cross, where the batch table changes at
    floor() steps between bucket lengths) or at quantiles of the bucket lengths ("quantile"). A
    coarse grid samples one tooth, so two nearly equal fits can pick teeth a few percent apart
    and train different batch tables (lab/training_s_cross.py). Candidates that give the same
    batch table are simulated once (same seed, same throughput). The seed differs from
    evaluation seeds so the choice is not tuned to the runs it is judged on. Returns (best
    s_cross, table of candidates: s_cross, throughput, rank_cv).
    """
    from suite.balance.policies import DualConstraint

    p = float(cost.p if p is None else p)
    S = buckets["S"].to_numpy(float)
    grids = {
        "quantile": lambda: np.quantile(S, np.linspace(0, 1, candidates), method="nearest"),
        "geometric": lambda: np.geomspace(S.min(), S.max(), candidates),
    }
    if spacing not in grids:
        raise ValueError(f"spacing must be one of {sorted(grids)}, got {spacing!r}")
    cands = np.unique(grids[spacing]())
    cfg = SimConfig(ranks=ranks, steps=steps, seed=seed)
    pols = [DualConstraint(m_mem=m_mem, m_comp=m_mem * s ** (p - 1), p=p) for s in cands]
    # one draw for the whole grid: simulate() would draw each candidate's corpus_size samples
    # with the same seed, and a shorter draw is a prefix of a longer one (the same tokens)
    sizes = [corpus_size(buckets, cfg, samples_per_rank_step(pol, buckets)) for pol in pols]
    corpus = draw_corpus(buckets, max(sizes), seed)
    seen, rows = {}, []
    for s, pol, n in zip(cands, pols, sizes):
        key = pol.batch_size(S).tobytes()
        if key not in seen:
            seen[key] = simulate(corpus[:n], pol, cost, cfg).metrics()
        m = seen[key]
        rows.append({"s_cross": s, "throughput": m["throughput"], "rank_cv": m["rank_cv"]})
    table = pd.DataFrame(rows)
    return float(table.loc[table["throughput"].idxmax(), "s_cross"]), table


def time_simulator(ranks: int = 1024, steps: int = 1000, repeats: int = 3) -> float:
    """Best-of-`repeats` seconds to simulate the default mix on `ranks` x `steps` (equal-token)."""
    from suite.balance.buckets import bucket_table
    from suite.balance.costmodel import WAN14B_M_MEM, default_cost_model
    from suite.balance.policies import EqualToken
    from suite.data.corpus import sample_corpus

    buckets = bucket_table(sample_corpus(100_000).tokens)
    cost, pol = default_cost_model(), EqualToken(WAN14B_M_MEM)
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        simulate(buckets, pol, cost, SimConfig(ranks=ranks, steps=steps)).metrics()
        best = min(best, time.perf_counter() - t0)
    return float(best)
