"""Print the README's verdict table (markdown) from a run's claims.json.

    python tools/readme_results.py reports/reference/h200/quick-5753865/claims.json

Columns: id, claim, paper, ours [95% CI], verdict, definition key (the metric of suite/claims.csv
the verdict used; "-" for a not-run claim).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from suite.report.html import fmt_ci, fmt_num

# the run the README's results table is generated from (the committed quick reference)
REFERENCE = "reports/reference/h200/quick-5753865"


def table(claims: list[dict]) -> str:
    out = [
        "| id | claim | paper | ours [95% CI] | verdict | definition key |",
        "|---|---|---|---|---|---|",
    ]
    nan = float("nan")
    for c in sorted(claims, key=lambda c: int(c["id"][1:])):
        measured = c["measured"] if c["measured"] is not None else nan
        lo = c["ci_low"] if c["ci_low"] is not None else nan
        hi = c["ci_high"] if c["ci_high"] is not None else nan
        ours = fmt_num(measured) + fmt_ci(lo, hi)
        if ours != "–" and c.get("unit"):
            ours += f" {c['unit']}"
        cells = [
            c["id"],
            c["claim"],
            c["paper_text"],
            ours,
            f"**{c['verdict']}**",
            f"`{c['metric']}`" if c["metric"] else "-",
        ]
        out.append("| " + " | ".join(str(x).replace("|", "\\|") for x in cells) + " |")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    path = Path(argv[0] if argv else f"{REFERENCE}/claims.json")
    print(table(json.loads(path.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
