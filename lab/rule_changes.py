"""Old rule against new rule, per claim, on run folders: what the ledger before the rules were
rewritten to read each claim as the paper states it would say of a run's own metric rows, beside
what today's ledger says.

    PYTHONPATH=. python3 lab/rule_changes.py RUN [RUN ...]      (Markdown on stdout)

A RUN is a folder with metrics.csv (its env.json names the GPU where there is one). The old rule of
a claim is rebuilt from today's (OLD_RULES: its metric and the fields that differed; an absolute
tolerance becomes the same fraction of the paper's value); claims absent here kept their rule.
tests/test_verdict_defects.py pins both readings on the committed references.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import pandas as pd

from suite.claims import assess, evaluate, load_claims

LEVEL = dict(reading="", direction="lower", null="baseline")  # C5/C6 as absolute levels
# claim: (the metric the old rule read, the fields in which the old rule differed from today's)
OLD_RULES = {
    "C1": ("r_tokens_sweep", dict(tolerance=0.15 / 0.35)),  # over the designed sweep
    "C2": ("r_bs2_sweep", dict(tolerance=0.05 / 0.92)),
    "C4": ("cv_reduction_sim", dict(rule="compare", tolerance=5 / 50)),  # C5 restated
    "C5": ("rank_cv_sim", dict(LEVEL, paper_value=18.9, tolerance=2 / 18.9)),
    "C6": ("step_cv_sim", dict(LEVEL, paper_value=10.4, tolerance=2 / 10.4)),
    "C7": ("throughput_gain_8_sim", dict(tolerance=5 / 25.6)),
    "C8": ("throughput_gain_16_sim", dict(tolerance=5 / 27.18)),
    "C10": ("peak_vram_util_gain", dict(tolerance=5 / 22.7)),  # cannot pass by construction
    "C11": ("fwd_speedup_wan", dict(tolerance=0.2 / 3.3)),
    "C12": ("bwd_dtile_speedup_wan", dict(rule="compare", tolerance=0.1 / 1.42)),
    "C13": ("saved_mem_reduction_wan", dict(also=None, tolerance=5 / 61.9)),  # one half
    "C15": ("loss_max_rel_diff", dict(also=None)),  # kernel numerics only
    "C17": ("fused_throughput_gain", dict(tolerance=5 / 25)),  # fewer blocks
    "C18": ("overall_throughput_gain_sim", dict(tolerance=5 / 27.2)),  # compounded, modelled
}


def old_verdict(claim_id: str, metrics: pd.DataFrame) -> tuple[str, str]:
    """(the old rule's verdict of claim_id on these metric rows, the metric it read); "not-run"
    where the rows lack that metric."""
    ledger = {c.id: c for c in load_claims()}
    key, fields = OLD_RULES[claim_id]
    rows = metrics[(metrics.claim == claim_id) & (metrics.metric == key)]
    if rows.empty:
        return "not-run", key
    r = rows.iloc[0]
    old = replace(ledger[claim_id], **fields)
    return assess(old, r.value, r.ci_low, r.ci_high, r.baseline, exact=key in old.exact)[0], key


def table(runs: list[Path]) -> str:
    cols = []
    for run in runs:
        env = run / "env.json"
        gpu = ""
        if env.is_file():
            from suite.report.pergpu import gpu_name

            gpu = gpu_name(json.loads(env.read_text())) + " "
        cols.append((f"{gpu}{run.name}", pd.read_csv(run / "metrics.csv")))
    head = ["claim", "old rule reads"] + [f"{n}: old -> new" for n, _ in cols] + ["new rule reads"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    new = {n: {v.id: v for v in evaluate(m)} for n, m in cols}
    for c in load_claims():
        old_key = OLD_RULES.get(c.id, (None,))[0]
        cells = [c.id, f"`{old_key}`" if old_key else "(unchanged)"]
        for n, m in cols:
            v = new[n][c.id]
            was = old_verdict(c.id, m)[0] if old_key else v.verdict
            cells.append(f"{was} -> **{v.verdict}**" if was != v.verdict else v.verdict)
        keys = {new[n][c.id].metric for n, _ in cols} - {""}
        cells.append(" / ".join(f"`{k}`" for k in sorted(keys)) or "-")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run folders with metrics.csv")
    print(table(ap.parse_args(argv).runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
