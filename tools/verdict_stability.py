"""Verdict stability across repeated runs: one row per claim, each run's verdict, measured value
and interval, whether the verdicts agree, and how often one run's interval holds another run's
value (its coverage), with the coverage pooled over claims.

    python tools/verdict_stability.py RUN_A RUN_B RUN_C [--out stability.md]

Each RUN is a run directory (or its claims.json). A run directory with a metrics.csv is judged
under today's rules (suite.claims.evaluate on its metric rows), so runs made under older rules
compare on one ledger; a claims.json alone is read as written. Coverage: over the ordered pairs
(i, j), i != j, of runs whose claim has the same primary metric, the share where run i's 95%
interval holds run j's value; a run without an interval holds nothing and is not counted. A
95% interval that describes run-to-run variation should hold another run's value about 95% of
the time; far less says the interval is narrower than what moves between runs.

Prints a Markdown table and the pooled coverage; with --out also writes them (and a CSV of
the table beside it). Exit status 1 when any claim's verdict differs between runs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

from suite.claims import evaluate


def load(run: str) -> list[dict]:
    p = Path(run)
    if p.is_dir() and (p / "metrics.csv").is_file():
        return [v.to_json() for v in evaluate(pd.read_csv(p / "metrics.csv"))]
    p = p / "claims.json" if p.is_dir() else p
    if not p.is_file():
        raise SystemExit(
            f"{run}: no metrics.csv or claims.json (give a run directory or a claims.json)"
        )
    return json.loads(p.read_text())


def _finite(*xs) -> bool:
    return all(isinstance(x, (int, float)) and math.isfinite(x) for x in xs)


def _fmt(c: dict) -> str:
    v, lo, hi = (c.get(k) for k in ("measured", "ci_low", "ci_high"))
    if not _finite(v):
        return "—"
    return f"{v:.3g} [{lo:.3g}, {hi:.3g}]" if _finite(lo, hi) else f"{v:.3g}"


def coverage(runs: list[dict[str, dict]], cid: str) -> tuple[int, int]:
    """(held, pairs) of one claim over the ordered pairs of runs (see the module doc)."""
    held = pairs = 0
    for i, a in enumerate(runs):
        for j, b in enumerate(runs):
            ca, cb = a.get(cid, {}), b.get(cid, {})
            if i == j or not ca.get("metric") or ca.get("metric") != cb.get("metric"):
                continue
            lo, hi, value = ca.get("ci_low"), ca.get("ci_high"), cb.get("measured")
            if _finite(lo, hi, value):
                pairs += 1
                held += lo <= value <= hi
    return held, pairs


def table(runs: list[str]) -> pd.DataFrame:
    claims = [{c["id"]: c for c in load(r)} for r in runs]
    ids = sorted(set().union(*claims), key=lambda i: int(i.lstrip("C")))
    rows = []
    for cid in ids:
        row = {"claim": cid}
        verdicts = []
        for k, cl in enumerate(claims):
            c = cl.get(cid, {})
            verdicts.append(c.get("verdict", "missing"))
            row[f"run {k + 1}"] = f"{verdicts[-1]}: {_fmt(c)}" if c else "missing"
        row["metric"] = next((c[cid].get("metric", "") for c in claims if cid in c), "")
        row["same"] = "yes" if len(set(verdicts)) == 1 else "NO"
        held, pairs = coverage(claims, cid)
        row["held"], row["pairs"] = held, pairs
        row["coverage"] = f"{held}/{pairs}" if pairs else "no interval"
        rows.append(row)
    return pd.DataFrame(rows)


def pooled(df: pd.DataFrame) -> str:
    held, pairs = int(df["held"].sum()), int(df["pairs"].sum())
    claims = int((df["pairs"] > 0).sum())
    share = f" ({100 * held / pairs:.0f}%)" if pairs else ""
    return (
        f"pooled coverage: {held}/{pairs}{share} of ordered run pairs, over {claims} claims with "
        f"an interval: how often one run's 95% interval holds another run's value"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("runs", nargs="+", help="run directories (or claims.json files)")
    ap.add_argument("--out", type=Path, help="write the Markdown table here (and a .csv beside)")
    a = ap.parse_args(argv)
    df = table(a.runs)
    md = df.drop(columns=["held", "pairs"]).to_markdown(index=False) + "\n\n" + pooled(df)
    print(md)
    if a.out:
        a.out.write_text(md + "\n")
        df.to_csv(a.out.with_suffix(".csv"), index=False)
    return 0 if (df["same"] == "yes").all() else 1


if __name__ == "__main__":
    sys.exit(main())
