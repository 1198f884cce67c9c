"""Experiments: one module per claim family.

Each module defines
    NAME: str                      experiment name (also its tables' prefix)
    NEEDS: str                     "cpu" (runs anywhere) or "cuda" (needs a CUDA GPU)
    def run(ctx: RunContext) -> dict[str, pd.DataFrame]
        measure; return raw tidy tables (name -> DataFrame). Table names are prefixed with NAME,
        e.g. "kernels_timings". The runner writes them atomically.
    def summarize(tables: dict[str, pd.DataFrame]) -> pd.DataFrame
        pure: raw tables -> metric rows (schema METRIC_COLUMNS, suite/metrics.py). Used both by `reproduce`
        and by `report RUN_DIR`, so verdicts are always recomputed from the raw tables alone.

A metric row is one number for one claim under one definition (suite/metrics.py). Which claims an
experiment feeds is said once, in the ledger (suite/claims.csv; suite.claims.claims_of).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from suite.metrics import METRIC_COLUMNS, metric_rows  # noqa: F401  (every experiment's schema)

# name -> module, in the order `reproduce` runs them (cheap CPU work first).
REGISTRY: dict[str, str] = {
    "shapes": "suite.experiments.shapes",  # (B, S) sweep of the real model: latency + memory
    "costmodel": "suite.experiments.costmodel",  # C3 fit; C1/C2 over the sweep
    "balance": "suite.experiments.balance",  # C4, C5, C6, C9 simulated with the fitted model
    "kernels": "suite.experiments.kernels",  # C11, C12 (GB/s, speedups)
    "opmemory": "suite.experiments.opmemory",  # C13 saved bytes, C16 kernels per call
    "training": "suite.experiments.training",  # C1/C2 on steps, C5-C10, C14, C15, C17, C18
    "e2e": "suite.experiments.e2e",  # C17 alternatives: diffusers Wan step, fused ops vs compile
}


def load(name: str) -> ModuleType:
    return importlib.import_module(REGISTRY[name])


def available() -> list[str]:
    """Experiment names whose module imports (a missing optional part is not fatal)."""
    out = []
    for name in REGISTRY:
        try:
            load(name)
        except ModuleNotFoundError:
            continue
        out.append(name)
    return out
