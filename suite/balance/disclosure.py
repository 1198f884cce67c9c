"""What a simulated verdict rests on, in words computed from the run's own tables: how far the
simulated micro-batches extrapolate the cost model beyond the largest shape the sweep measured.

The simulator costs every rank's micro-batch with the fit of the shape sweep; a micro-batch of
more latent tokens B*S than any measured shape is an extrapolation of that fit, and the claims'
conditions must say by how much (the factor, with the word), not leave it to the reader.
"""

from __future__ import annotations

import pandas as pd


def extrapolation_factor(ranks: pd.DataFrame, sweep: pd.DataFrame) -> tuple[float, int, int]:
    """(factor, largest simulated micro-batch tokens, largest measured B*S): the factor is the
    first over the second. `ranks`: the simulation's rank records (balance_ranks: B, S of a rank's
    one micro-batch; B = 0 where a micro-batched policy gave the rank several, each packed under
    M_mem, whose `tokens` is their sum, not a micro-batch: left out); `sweep`: the measured
    shapes (shapes_sweep, `B` and `S` columns)."""
    for name, table, cols in (("ranks", ranks, ["B", "S"]), ("sweep", sweep, ["B", "S"])):
        missing = [c for c in cols if c not in table]
        if missing or table.empty:
            raise ValueError(
                f"{name}: needs a non-empty table with columns {cols}; got {list(table)}"
            )
    simulated = int((ranks["B"] * ranks["S"]).max())
    measured = int((sweep["B"] * sweep["S"]).max())
    return simulated / measured, simulated, measured


def extrapolation_text(ranks: pd.DataFrame, sweep: pd.DataFrame) -> str:
    """The conditions' words, e.g. "extrapolation 10.2x: simulated micro-batches up to 767400
    tokens, costed by a fit of shapes up to B*S = 75600"; a factor <= 1 says the sweep covers them."""
    factor, simulated, measured = extrapolation_factor(ranks, sweep)
    if factor <= 1:
        return (
            f"no extrapolation: simulated micro-batches up to {simulated} tokens, within the "
            f"measured shapes (B*S up to {measured})"
        )
    return (
        f"extrapolation {factor:.1f}x: simulated micro-batches up to {simulated} tokens, costed "
        f"by a fit of shapes measured up to B*S = {measured}"
    )
