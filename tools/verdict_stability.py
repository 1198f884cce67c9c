"""Verdict stability across repeated runs of one commit: one row per
claim, each run's verdict, measured value and interval, and whether the verdicts agree.

    python tools/verdict_stability.py RUN_A RUN_B RUN_C [--out stability.md]

Each RUN is a run directory (or its claims.json). Prints a Markdown table; with --out also
writes it (and a CSV beside it). Exit status 1 when any claim's verdict differs between runs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd


def load(run: str) -> list[dict]:
    p = Path(run)
    p = p / "claims.json" if p.is_dir() else p
    if not p.is_file():
        raise SystemExit(f"{run}: no claims.json (give a run directory or its claims.json)")
    return json.loads(p.read_text())


def _fmt(c: dict) -> str:
    v, lo, hi = (c.get(k) for k in ("measured", "ci_low", "ci_high"))
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    s = f"{v:.3g}"
    if lo is not None and hi is not None and not (math.isnan(lo) or math.isnan(hi)):
        s += f" [{lo:.3g}, {hi:.3g}]"
    return s


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
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("runs", nargs="+", help="run directories (or claims.json files)")
    ap.add_argument("--out", type=Path, help="write the Markdown table here (and a .csv beside)")
    a = ap.parse_args(argv)
    df = table(a.runs)
    md = df.to_markdown(index=False) if hasattr(df, "to_markdown") else df.to_string(index=False)
    print(md)
    if a.out:
        a.out.write_text(md + "\n")
        df.to_csv(a.out.with_suffix(".csv"), index=False)
    return 0 if (df["same"] == "yes").all() else 1


if __name__ == "__main__":
    sys.exit(main())
