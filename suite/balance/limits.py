"""How much work `simulate` and `forecast` take on: a bound on the samples a simulation plans.

A simulation holds its whole plan (every sample index of every micro-batch of every rank and
step) and costs it at once, so its memory and time grow with the samples it plans,
    planned = max(steps x ranks x samples per rank-step, the corpus drawn for it)
(suite.balance.simulator.samples_per_rank_step, corpus_size). Measured per planned sample
(lab/simulate_bounds.py, lab/results/simulate_bounds.txt: 5 policies, the default mix and an
all-image manifest, 16 and 128 ranks x 1000 steps): at most 169 bytes of peak memory and 6.4 us
(pack-kk-flops; 0.14-1.9 us for the others). With 192 bytes a sample and 8 GiB for one
simulation the bound is about 45 million samples, which takes at most about 5 minutes (the
slowest policy) and mostly under a minute. Above it, the run is refused before any work, with
the largest --steps (or --gpus) that fits.
"""

from __future__ import annotations

import math

import pandas as pd

MEMORY_BUDGET = 8 * 2**30  # bytes one simulation may hold
BYTES_PER_SAMPLE = 192  # peak bytes per planned sample, rounded up from the measured 169
MAX_PLANNED = MEMORY_BUDGET // BYTES_PER_SAMPLE  # about 45 million samples
SECONDS_PER_SAMPLE = 6.4e-6  # the slowest policy's time per planned sample
LIMIT_HELP = (
    f"a simulation plans at most {MAX_PLANNED / 1e6:.0f} million samples (steps x ranks x "
    f"samples per rank-step: {MEMORY_BUDGET / 2**30:.0f} GiB at {BYTES_PER_SAMPLE} bytes "
    f"a sample, at most ~{MAX_PLANNED * SECONDS_PER_SAMPLE / 60:.0f} min); above it the "
    "run is refused and the largest --steps that fits is named"
)


def planned_samples(buckets: pd.DataFrame, policy, ranks: int, steps: int) -> tuple[float, float]:
    """(samples a simulation of `policy` on `ranks` x `steps` plans (the module doc), samples
    per rank-step)."""
    from suite.balance.simulator import SimConfig, corpus_size, samples_per_rank_step

    per = samples_per_rank_step(policy, buckets)
    corpus = corpus_size(buckets, SimConfig(ranks=ranks, steps=steps), per)
    return max(steps * ranks * per, corpus), per


def check_work(buckets: pd.DataFrame, policy, ranks: int, steps: int, share: int = 1) -> None:
    """Raise ValueError naming --gpus and --steps when a simulation would plan more than its
    share (1/share: simulations running at once) of MAX_PLANNED samples."""
    cap = MAX_PLANNED / share
    n, per = planned_samples(buckets, policy, ranks, steps)
    if n <= cap:
        return
    steps_fit = math.floor(cap / (ranks * per))  # the corpus holds >= 8 steps (corpus_size)
    gpus_fit = math.floor(cap / (max(steps, 8) * per))
    name = getattr(policy, "name", type(policy).__name__)
    at = f" ({share} simulations at once: --jobs)" if share > 1 else ""
    hint = f"at most --gpus {gpus_fit} at --steps {steps}" if gpus_fit >= 1 else "fewer ranks"
    if steps_fit >= 8:
        hint = f"at most --steps {steps_fit} at --gpus {ranks}, or {hint}"
    raise ValueError(
        f"--gpus {ranks} x --steps {steps} of {name} plans about {n:.3g} samples, above the "
        f"limit of {cap:.3g}{at} ({MEMORY_BUDGET / 2**30:.0f} GiB at {BYTES_PER_SAMPLE} bytes "
        f"a sample): use {hint}"
    )
