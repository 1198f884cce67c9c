"""Print the README's verdict table (markdown) from committed runs.

    python tools/readme_results.py --per-gpu          # the README's table: one column per GPU
    python tools/readme_results.py --figure docs/claims-per-gpu.svg   # the README's figure
    python tools/readme_results.py reports/reference/h200/quick-5753865/claims.json

--per-gpu: one row per claim, one column per GPU's reference run (REFERENCES; the GPU named by the
run's env.json) holding its verdict and value [95% CI] (for C11-C13 also the verdict against
torch.compile instead of the paper's eager baseline), the definition key (the metric of
suite/claims.csv the verdict used), and with two GPUs or more whether their verdicts differ (why
they do is the README's prose). With a claims.json: that run's table, columns id, claim, paper,
ours [95% CI], verdict, definition key ("-" for a not-run claim). --figure PATH: the report's
opening figure drawn from REFERENCES, one mark per GPU (SVG or PNG by PATH's suffix).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

from suite.report.html import fmt_ci, fmt_num
from suite.report.pergpu import gpus, load_run, per_gpu

ROOT = Path(__file__).resolve().parents[1]
# each GPU's reference run: the README's table has one column per entry
REFERENCES = ("reports/reference/h200/quick-85dc565", "reports/reference/h100/quick-c2036da")
REFERENCE = REFERENCES[0]  # the single-run table's default


def _row(cells: list) -> str:
    return "| " + " | ".join(str(x).replace("|", "\\|") for x in cells) + " |"


def _ours(measured, lo, hi, unit: str) -> str:
    nan = math.nan
    ours = fmt_num(nan if measured is None else measured)
    ours += fmt_ci(nan if lo is None else lo, nan if hi is None else hi)
    return f"{ours} {unit}" if ours != "–" and unit else ours


def table(claims: list[dict]) -> str:
    out = [
        "| id | claim | paper | ours [95% CI] | verdict | definition key |",
        "|---|---|---|---|---|---|",
    ]
    for c in sorted(claims, key=lambda c: int(c["id"][1:])):
        cells = [
            c["id"],
            c["claim"],
            c["paper_text"],
            _ours(c["measured"], c["ci_low"], c["ci_high"], c.get("unit", "")),
            f"**{c['verdict']}**",
            f"`{c['metric']}`" if c["metric"] else "-",
        ]
        out.append(_row(cells))
    return "\n".join(out)


def per_gpu_table(runs: list[Path | str]) -> str:
    """The README's table from run folders, one per GPU (see the module doc)."""
    long = pd.concat([load_run(ROOT / r) for r in runs], ignore_index=True)
    wide, names = per_gpu(long), gpus(long)
    units = long.drop_duplicates("id").set_index("id")["unit"]
    several = len(names) > 1
    run_of = long.groupby("gpu")["run"].first()  # <gpu>/<kind>-<sha>: which run, which commit
    head = ["id", "claim", "paper", *(f"{g} ({run_of[g]}): verdict, ours [95% CI]" for g in names)]
    head += ["definition key"] + (["GPUs"] if several else [])
    out = [_row(head), _row(["---"] * len(head))]
    for r in wide.to_dict("records"):
        cells = [r["id"], r["claim"], r["paper_text"]]
        for g in names:
            value = _ours(r[f"{g} measured"], r[f"{g} ci_low"], r[f"{g} ci_high"], units[r["id"]])
            against = r[f"{g} compile_verdict"]
            if against:  # the ledger's reading against torch.compile, beside the paper's eager one
                num = fmt_num(r[f"{g} compile_value"])
                value += f"; vs torch.compile: **{against}**" + ("" if num == "–" else f" {num}")
            cells.append(f"**{r[f'{g} verdict']}** {value}")
        keys = list(dict.fromkeys(r[f"{g} metric"] for g in names))
        cells.append(" / ".join(f"`{k}`" for k in keys if k) or "-")
        if several:
            cells.append("**differ**" if r["differs"] else "agree")
        out.append(_row(cells))
    return "\n".join(out)


def per_gpu_figure(runs: list[Path | str], path: Path) -> None:
    """The opening figure (suite.report.plots.opening) of the runs, one mark per GPU, saved."""
    import matplotlib as mpl

    from suite.report.plots import RC, opening

    long = pd.concat([load_run(ROOT / r) for r in runs], ignore_index=True)
    with mpl.rc_context(RC):
        fig = opening.figure(long)
        fig.savefig(path, metadata={"Date": None} if path.suffix == ".svg" else None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("claims", nargs="?", type=Path, help="a run's claims.json (single-run table)")
    ap.add_argument("--per-gpu", action="store_true", help="one column per GPU (REFERENCES)")
    ap.add_argument("--figure", type=Path, help="save the opening figure of REFERENCES here")
    a = ap.parse_args(argv)
    if a.figure:
        per_gpu_figure(list(REFERENCES), a.figure)
        print(f"wrote {a.figure}")
        return 0
    if a.per_gpu:
        if a.claims:
            ap.error("--per-gpu reads REFERENCES; give no claims.json with it")
        print(per_gpu_table(list(REFERENCES)))
        return 0
    path = a.claims or ROOT / REFERENCE / "claims.json"
    try:
        claims = json.loads(path.read_text())
    except (OSError, ValueError) as e:  # missing, unreadable or not JSON
        ap.error(f"{path}: cannot read it as a claims.json ({e})")
    print(table(claims))
    return 0


if __name__ == "__main__":
    sys.exit(main())
