"""asv `track_` benchmarks of the claim values CPU can recompute from a committed reference's raw
tables, read by today's ledger (suite.claims), so asv's history shows the commit that moved a
verdict's value, and CI fails when one leaves the reference's interval.

- C1-C3: the cost fits refitted from the reference's shape sweep by the current fitting code
  (suite.experiments.costmodel, M_mem from the reference's GPU memory), C1's equal-token training
  batches summarised from its training tables.
- C4-C9: the balance experiment re-simulated by the current code on that refit with the
  reference's own profile (quick: 1000 steps x 5 plan seeds) and BOOTSTRAP_REPLICATES bootstrap
  replicates, ~2 min on 2 cores; its values reproduce the committed re-simulation (SIMULATED)
  exactly. The intervals tracked are those of that many replicates, not the profile's.

Each claim's primary metric row must lie within the reference's committed 95% interval (its
metrics.csv); the value tracked is the ledger's reading (C5/C6: the relative reduction), the
interval's ends beside it.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "reports" / "reference" / "h200" / "quick-5753865"
# C4-C9 are judged against the same sweep re-simulated by the method that ships (hierarchical
# bootstrap intervals, s_cross tuned on the fine grid), committed beside the stability runs; the
# GPU run's own balance rows predate that method and their plan-seed intervals leave out the sweep.
SIMULATED = REFERENCE.parent / "stability-5753865" / "bootstrap-cpu" / "quick-5753865"
CLAIMS = [f"C{i}" for i in range(1, 10)]
SIMULATED_CLAIMS = {f"C{i}" for i in range(4, 10)}
# The quick profile's 200 replicates take ~270 s on CI's 2 cores, 60 ~100 s less: CI's 15 minutes
# keep the smaller count (values are the full-data ones either way)
BOOTSTRAP_REPLICATES = 60


def committed_rows():
    """The committed metric rows each claim is checked against: C1-C3 the reference run's,
    C4-C9 its sweep's re-simulation (SIMULATED)."""
    import pandas as pd

    ref, sim = pd.read_csv(REFERENCE / "metrics.csv"), pd.read_csv(SIMULATED / "metrics.csv")
    return pd.concat(
        [ref[~ref.claim.isin(SIMULATED_CLAIMS)], sim[sim.claim.isin(SIMULATED_CLAIMS)]],
        ignore_index=True,
    )


def recompute(reference: Path = REFERENCE, profile: str = "quick"):
    """The metric rows of C1-C9 recomputed from `reference`'s raw tables by the current code."""
    import pandas as pd

    from suite.experiments import balance, costmodel, training
    from suite.experiments.balance import summary as balance_summary
    from suite.rundir import RunContext, RunDir

    ref = RunDir(reference)
    # M_mem follows the GPU memory the reference ran on: this machine has none to read
    capacity = float(ref.read_table("costmodel_fit")["capacity_bytes"].iloc[0])
    with tempfile.TemporaryDirectory(prefix="claims-") as tmp:
        (Path(tmp) / "results").mkdir()
        for f in (reference / "results").glob("shapes_sweep.*"):
            shutil.copy2(f, Path(tmp) / "results" / f.name)
        run = RunDir(tmp)
        options = {"capacity_bytes": capacity, "balance_replicates": BOOTSTRAP_REPLICATES}
        ctx = RunContext(run, profile, "cpu", options=options)
        for name, df in costmodel.run(ctx).items():
            run.write_table(name, df)
        fits = costmodel.summarize(run.tables())
        simulated = balance_summary.summarize(balance.run(ctx))
    trained = training.summarize(ref.tables())  # C1: the equal-token batches
    rows = pd.concat([fits, simulated, trained], ignore_index=True)
    return rows[rows["claim"].isin(CLAIMS)].reset_index(drop=True)


def claim_values(rows) -> dict:
    """Per claim: the ledger's reading of `rows` (metric, value, interval) and the committed
    interval its raw value must stay within."""

    from suite.claims import evaluate

    committed = committed_rows()
    out = {}
    for v in evaluate(rows):
        if v.id not in CLAIMS:
            continue
        raw = rows[(rows.claim == v.id) & (rows.metric == v.metric)]
        want = committed[(committed.claim == v.id) & (committed.metric == v.metric)]
        out[v.id] = {
            "metric": v.metric,
            "value": v.measured,
            "ci_low": v.ci_low,
            "ci_high": v.ci_high,
            "raw": float(raw.value.iloc[0]) if len(raw) else float("nan"),
            "want": tuple(want[["ci_low", "ci_high"]].iloc[0]) if len(want) else None,
        }
    return out


class ClaimValues:
    """Each CPU claim's primary value, as today's ledger reads it, and its interval's ends."""

    version = 1
    timeout = 900
    params = (CLAIMS,)
    param_names = ["claim"]

    def setup_cache(self):  # the recomputation: ~1 min on 2 cores
        return claim_values(recompute())

    def track_value(self, cache, claim):
        c = cache[claim]
        if c["want"] is None:
            raise ValueError(f"{claim}: {c['metric']!r} has no committed row in {REFERENCE.name}")
        lo, hi = c["want"]
        if not lo <= c["raw"] <= hi:
            raise ValueError(
                f"{claim}: {c['metric']} = {c['raw']:.6g} left its committed interval "
                f"[{lo:.6g}, {hi:.6g}] ({(SIMULATED if claim in SIMULATED_CLAIMS else REFERENCE).name})"
            )
        return c["value"]

    def track_ci_low(self, cache, claim):
        return cache[claim]["ci_low"]

    def track_ci_high(self, cache, claim):
        return cache[claim]["ci_high"]
