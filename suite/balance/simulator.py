"""Cluster simulator: R synchronous data-parallel ranks for N steps under a batching policy.

Model (per step): every rank draws one bucket batch independently, as the bucket sampler deals them
(a batch of bucket k comes up with probability proportional to share_k / B_k, the bucket's share of
the epoch's batches). Rank compute = fixed part + variable part x noise, where the noise is the mean
of B per-sample multiplicative factors, each Gamma with mean 1 and CV `noise_cv`; the mean of B
such factors is exactly Gamma(B / cv^2, cv^2 / B), so it is drawn once per batch (`noisy`; its
optional rank-level factor is used by the trace validation, not by `simulate`). Step time =
max over ranks + collective + optimizer. Everything is a (steps, ranks) numpy array, no Python
loop over steps or ranks.

Metrics (see BALANCING.md):
    rank_cv      per-step std/mean of rank compute (population std), averaged over steps
    maxmean      per-step max/mean of rank compute, averaged over steps
    bubble       per-step 1 - mean/max (= the imbalance rate (max - mean)/max), averaged
    step_cv      std/mean of step time across steps
    step_cv_per_token  std/mean across steps of step time per latent token
    throughput   latent tokens (no padding) of all ranks / total time, tokens/s
    floor_p5     5th percentile over steps of the step's tokens / step time

Timing it (benchmarks/ is another engineer's): `simulate(bucket_table(sample_corpus(100_000).tokens),
EqualToken(75600), default_cost_model(), SimConfig(ranks=1024, steps=1000))` inside
`time.perf_counter()`; see `time_simulator` below, which returns seconds for that case.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd


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
    lacks raise KeyError naming them (measure the buckets you simulate).
    """

    fixed_s = 0.0

    def __init__(self, table: pd.DataFrame) -> None:
        missing = {"B", "S", "step_s"} - set(table.columns)
        if missing:
            raise ValueError(f"latency table lacks columns {sorted(missing)}; needs B, S, step_s")
        med = table.groupby(["B", "S"])["step_s"].median()
        self._keys = np.array([int(b) * 2**32 + int(s) for b, s in med.index], dtype=np.int64)
        order = np.argsort(self._keys)
        self._keys, self._vals = self._keys[order], med.to_numpy(float)[order]

    def predict(self, B, S) -> np.ndarray:
        B, S = np.broadcast_arrays(np.asarray(B, np.int64), np.asarray(S, np.int64))
        k = B * 2**32 + S
        i = np.clip(np.searchsorted(self._keys, k), 0, len(self._keys) - 1)
        miss = self._keys[i] != k
        if miss.any():
            j = np.flatnonzero(miss.ravel())[0]
            raise KeyError(
                f"latency table has no measurement for B={B.ravel()[j]}, S={S.ravel()[j]}"
            )
        return self._vals[i]


@dataclass
class SimResult:
    policy: str
    ranks: int
    S: np.ndarray  # (steps, ranks) sequence length of each rank's batch (0 for mixed batches)
    B: np.ndarray  # (steps, ranks) samples per rank
    tokens: np.ndarray  # (steps, ranks) latent tokens per rank
    compute: np.ndarray  # (steps, ranks) seconds
    step_s: np.ndarray  # (steps,) synchronous step time
    extra: dict | None = None

    def metrics(self) -> dict[str, float]:
        c = self.compute
        mean, mx = c.mean(axis=1), c.max(axis=1)
        step_tokens = self.tokens.sum(axis=1)
        per_tok = self.step_s / step_tokens
        out = {
            "rank_cv": float(np.mean(c.std(axis=1) / mean)),
            "maxmean": float(np.mean(mx / mean)),
            "bubble": float(np.mean(1 - mean / mx)),
            "step_cv": float(self.step_s.std() / self.step_s.mean()),
            "step_cv_per_token": float(per_tok.std() / per_tok.mean()),
            "throughput": float(step_tokens.sum() / self.step_s.sum()),
            "floor_p5": float(np.percentile(step_tokens / self.step_s, 5)),
            "step_s_mean": float(self.step_s.mean()),
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


def simulate(buckets: pd.DataFrame, policy, cost, cfg: SimConfig) -> SimResult:
    """Simulate `policy` (a bucket policy with batch_size(S), or a global policy with plan_steps)
    on the sample distribution `buckets` (columns S, share) with `cost` (predict(B, S), fixed_s)."""
    if hasattr(policy, "simulate"):  # coordinated policies bring their own step model
        return policy.simulate(buckets, cost, cfg)
    S_k = buckets["S"].to_numpy(np.int64)
    B_k = np.asarray(policy.batch_size(S_k), np.int64)
    w = buckets["share"].to_numpy(float) / B_k
    cdf = np.cumsum(w / w.sum())
    rng = np.random.default_rng([cfg.seed, cfg.ranks])
    k = np.minimum(
        np.searchsorted(cdf, rng.random((cfg.steps, cfg.ranks)), side="right"), len(S_k) - 1
    )
    S, B = S_k[k], B_k[k]
    base = np.asarray(cost.predict(B_k, S_k), float)[k]
    compute = noisy(rng, base, float(cost.fixed_s), B, cfg.noise_cv)
    step_s = compute.max(axis=1) + cfg.collective_s + cfg.optimizer_s
    return SimResult(
        getattr(policy, "name", type(policy).__name__), cfg.ranks, S, B, B * S, compute, step_s
    )


def tune_s_cross(
    buckets: pd.DataFrame,
    cost,
    m_mem: float,
    ranks: int = 16,
    steps: int = 300,
    seed: int = 10_007,
    candidates: int = 12,
    p: float | None = None,
) -> tuple[float, pd.DataFrame]:
    """Choose the dual policy's crossover length s_cross (hence M_comp) by simulated throughput.

    `cost` is the simulator's step model; the policy's exponent is `p` (default cost.p), so the
    rule B*S^p <= M_comp can be tuned on a step model of another form (training: the quadratic
    one, which predicts measured steps better). Candidates are quantiles of the bucket lengths;
    the seed differs from evaluation seeds so the choice is not tuned to the runs it is judged
    on. Returns (best s_cross, table of candidates).
    """
    from suite.balance.policies import DualConstraint

    p = float(cost.p if p is None else p)

    S = buckets["S"].to_numpy(float)
    cands = np.unique(np.quantile(S, np.linspace(0, 1, candidates), method="nearest"))
    rows = []
    for s in cands:
        pol = DualConstraint(m_mem=m_mem, m_comp=m_mem * s ** (p - 1), p=p)
        m = simulate(buckets, pol, cost, SimConfig(ranks=ranks, steps=steps, seed=seed)).metrics()
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
