"""The metric-row schema: what every experiment's `summarize` returns and the ledger judges.

A metric row is one number for one claim under one definition:
    claim       "C5"
    metric      definition key, e.g. "rank_cv_measured"; the ledger names which key is primary
    value       the measured number (in `unit`)
    ci_low, ci_high   95% interval where the number is statistical, else NaN
    baseline    the "before" number where the claim is a before -> after pair, else NaN
    unit        "%", "x", "R", "tokens/s", "GB", "kernels", ...
    conditions  short text: width, layers, seq lengths, dtype, ranks, real or emulated
    evidence    table name(s) and figure name the number comes from
    evidence_kind   what stands behind it (suite.evidence): set from the first table `evidence`
                names, by that table's writer's EVIDENCE declaration and the table's own data
    ci_low_mcse, ci_high_mcse   Monte Carlo standard error of each end where the interval is a
                percentile over a finite number of resampled replicates (a bootstrap), else NaN:
                how far the replicate count alone moves it (the verdict rule reads it)
"""

from __future__ import annotations

import pandas as pd

METRIC_COLUMNS = [
    "claim",
    "metric",
    "value",
    "ci_low",
    "ci_high",
    "baseline",
    "unit",
    "conditions",
    "evidence",
    "evidence_kind",
    "ci_low_mcse",
    "ci_high_mcse",
]


def metric_rows(rows: list[dict]) -> pd.DataFrame:
    """Build a metrics frame with every column present (missing ones as NaN / empty)."""
    df = pd.DataFrame(rows, columns=METRIC_COLUMNS)
    for col in ("conditions", "evidence", "evidence_kind", "unit", "metric", "claim"):
        df[col] = df[col].astype(object).fillna("").astype(str)
    return df
