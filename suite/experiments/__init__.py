"""Experiments: one module per claim family.

Each module defines
    NAME: str                      experiment name (also its tables' prefix)
    NEEDS: str                     "cpu" (runs anywhere) or "cuda" (needs a CUDA GPU)
    def run(ctx: RunContext) -> dict[str, pd.DataFrame]
        measure; return raw tidy tables (name -> DataFrame). Table names are prefixed with NAME,
        e.g. "kernels_timings". The runner writes them atomically.
    def summarize(tables: dict[str, pd.DataFrame]) -> pd.DataFrame
        pure: raw tables -> metric rows (schema METRIC_COLUMNS, suite/metrics.py). Used both by `reproduce`
        and by `report RUN_DIR`, so verdicts are always recomputed from the raw tables alone
        (beside them the report passes `run_env`, the run's GPU model and commit from env.json:
        suite.spread reads it).

A metric row is one number for one claim under one definition (suite/metrics.py). Which claims an
experiment feeds is said once, in the ledger (suite/claims.csv; suite.claims.claims_of).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from suite.metrics import METRIC_COLUMNS, metric_rows  # noqa: F401  (every experiment's schema)

# name -> module, in the order `reproduce` runs them (cheap CPU work first).
REGISTRY: dict[str, str] = {
    "shapes": "suite.experiments.costmodel.sweep",  # (B, S) sweep of the real model: latency + memory
    "costmodel": "suite.experiments.costmodel",  # C3 fit; C1/C2 over the sweep
    "balance": "suite.experiments.balance",  # C4, C5, C6, C9 simulated with the fitted model
    "kernels": "suite.experiments.kernels",  # C11, C12 (GB/s, speedups)
    "opmemory": "suite.experiments.opmemory",  # C13 saved bytes, C16 kernels per call
    "training": "suite.experiments.training",  # C1/C2 on steps, C5-C10, C14, C15, C17, C18
    "e2e": "suite.experiments.e2e",  # C17 alternatives: diffusers Wan step, fused ops vs compile
}


# Which experiments read another's tables (docs/architecture.md, "Order"): REGISTRY runs each
# after its inputs, and `reproduce --only` adds them so a selected one never runs without them.
DEPENDS: dict[str, tuple[str, ...]] = {
    "costmodel": ("shapes",),
    "balance": ("costmodel",),
    "training": ("costmodel",),
}


def check_order() -> None:
    """Raise ValueError unless DEPENDS names registered experiments and REGISTRY's order runs
    each one after every experiment it reads."""
    order = list(REGISTRY)
    for name, inputs in DEPENDS.items():
        for n in (name, *inputs):
            if n not in REGISTRY:
                raise ValueError(
                    f"DEPENDS: {n!r} (in the entry of {name!r}) is not an experiment; "
                    f"experiments: {', '.join(order)}"
                )
        if late := [n for n in inputs if order.index(n) > order.index(name)]:
            raise ValueError(
                f"DEPENDS: {name!r} reads {', '.join(late)}, which REGISTRY runs after it; "
                f"REGISTRY order: {', '.join(order)}"
            )


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
