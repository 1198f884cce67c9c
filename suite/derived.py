"""Metrics derived from other metrics of the same run, for a claim whose evidence spans two
experiments. One row of DERIVED per derived metric: data, not code. It sits beside the metric
schema (suite.metrics), not in an experiment, because its factors come from two of them, and not
in the report, which draws and formats numbers but computes none.

C18 (dual-constraint + fused AdaLN over equal-token + Wan's AdaLN) is the balance gain of the
trace simulation on the run's 30-block cost table (C8's key) compounded with the fused op's
measured step gain on the same 30-block model (e2e, 81 frames 480p): the two changes act on
different things (which batches a rank gets; how long each block's norms take), so their gains
multiply. Its interval adds the factors' log-space standard errors (delta method; the factors are
measured independently), each read off its own 95% interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from suite import evidence

Z95 = 1.959964


@dataclass(frozen=True)
class Derived:
    claim: str
    metric: str
    factors: tuple[str, ...]  # metric keys, in %; the derived gain is prod(1 + g) - 1
    what: str


DERIVED = (
    Derived(
        "C18",
        "overall_throughput_gain_sim",
        ("throughput_gain_16_sim", "e2e_gain_eager_adaln_v81x480"),
        "dual-constraint's simulated throughput gain at 16 ranks (balance) compounded with the "
        "fused AdaLN's measured step gain over diffusers' eager block (e2e)",
    ),
)


def _log_se(value: float, lo: float, hi: float) -> float:
    """Standard error of log(1 + g) from g's 95% interval (all in %)."""
    return (math.log1p(hi / 100) - math.log1p(lo / 100)) / (2 * Z95)


def _s(x) -> str:
    return x if isinstance(x, str) else ""


def derive(metrics: pd.DataFrame) -> list[dict]:
    """Metric rows (suite.experiments.METRIC_COLUMNS) of every DERIVED whose factors all have a
    finite value and interval in `metrics`; the others are left out (the claim's next key or
    its not-run reason stands)."""
    out = []
    for d in DERIVED:
        rows = [metrics[metrics.metric == f] for f in d.factors]
        if any(r.empty for r in rows):
            continue
        rs = [r.iloc[0] for r in rows]
        nums = [(float(r.value), float(r.ci_low), float(r.ci_high)) for r in rs]
        if not all(math.isfinite(x) for n in nums for x in n):
            continue
        log = sum(math.log1p(v / 100) for v, _, _ in nums)
        se = math.sqrt(sum(_log_se(*n) ** 2 for n in nums))
        parts = "; ".join(f"{r.metric} = {r.value:.2f}% ({r.conditions})" for r in rs)
        out.append(
            dict(
                claim=d.claim,
                metric=d.metric,
                value=100 * math.expm1(log),
                ci_low=100 * math.expm1(log - Z95 * se),
                ci_high=100 * math.expm1(log + Z95 * se),
                unit="%",
                conditions=f"{d.what}: prod(1 + g) - 1 of {parts}; 95% interval in log space, "
                "the factors' standard errors added in quadrature",
                evidence="metrics " + ", ".join(d.factors),
                evidence_kind=evidence.weakest(_s(r.get("evidence_kind")) for r in rs),
            )
        )
    return out
