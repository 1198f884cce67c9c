"""C11's and C12's judged speedups re-summarized by today's code from runs' kernel tables, and how
often one run's interval holds another's value. For stability runs whose whole run directory is
not committed (only raw/ kernel tables): their summaries-now tables predate a change to the
kernels summary, and this says what today's summary makes of the same measurements.

    PYTHONPATH=. python3 lab/kernel_coverage_now.py RUN [RUN ...]

A RUN is a folder with env.json and the kernel tables in raw/ or results/ (kernels_timings.csv,
kernels_samples.csv or .csv.gz).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from suite import spread
from suite.experiments import kernels

JUDGED = ("fwd_speedup_wan", "bwd_dtile_speedup_wan")  # C11's and C12's metrics


def table(run: Path, name: str) -> pd.DataFrame:
    for sub in ("raw", "results"):
        for suffix in (".csv", ".csv.gz"):
            if (f := run / sub / f"{name}{suffix}").is_file():
                return pd.read_csv(f)
    raise SystemExit(f"{run}: no {name}.csv(.gz) in raw/ or results/")


def judged(run: Path) -> pd.DataFrame:
    env = json.loads((run / "env.json").read_text())
    tables = {t: table(run, t) for t in ("kernels_timings", "kernels_samples")}
    m = kernels.summarize(tables | {spread.RUN_ENV: spread.run_env(env)}).set_index("metric")
    return m.loc[list(JUDGED), ["value", "ci_low", "ci_high"]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("runs", nargs="+", type=Path)
    a = ap.parse_args(argv)
    rows = {r.as_posix(): judged(r) for r in a.runs}
    for metric in JUDGED:
        print(metric)
        got = {r: m.loc[metric] for r, m in rows.items()}
        for r, v in got.items():
            print(f"  {r}: {v.value:.4f} [{v.ci_low:.4f}, {v.ci_high:.4f}]")
        pairs = [(a, b) for a in got for b in got if a != b]
        held = sum(got[a].ci_low <= got[b].value <= got[a].ci_high for a, b in pairs)
        print(f"  one run's interval holds another's value: {held}/{len(pairs)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
