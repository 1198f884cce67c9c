"""Verdict stability across repeated runs, per GPU: one row per claim, each run's verdict, measured
value and interval, whether the verdicts agree, and how often one run's interval holds another
run's value (its coverage), with the coverage pooled over claims and checked against the
acceptance (pooled >= 75%, no claim under 50%).

    python tools/verdict_stability.py RUN_A RUN_B RUN_C [RUN_D ...] [--out stability.md]

Each RUN is a run directory (or its claims.json). A run directory with a metrics.csv is judged
under today's rules (suite.claims.evaluate on its metric rows), so runs made under older rules
compare on one ledger; a claims.json alone is read as written. The GPU of a run is its env.json's
(suite.report.pergpu.gpu_name; "unknown GPU" without one); runs are compared within their GPU
only, one table per GPU. Coverage: over the ordered pairs (i, j), i != j, of one GPU's runs whose
claim has the same primary metric, the share where run i's 95% interval holds run j's value; a run
without an interval holds nothing and is not counted. A 95% interval that describes run-to-run
variation should hold another run's value about 95% of the time; far less says the interval is
narrower than what moves between runs.

Where the verdicts differ, the column "how" says whether two decisive verdicts contradict each
other ("contradict") or runs read inconclusive where another decides ("inconclusive vs <verdict>":
a run with more data, a full profile beside quick ones, may decide where a narrower sample cannot;
it is still a difference, counted in "verdicts differ"). The column "split at" names the ledger
boundary nearest the runs' interval ends and each run's nearest end: ends a few tenths either side of one boundary are
intervals that agree, with a verdict that cannot (any re-measurement flips it). A bootstrap end
within its Monte Carlo reach of a boundary (the metric rows' ci_low_mcse / ci_high_mcse) is no
such split: the rule itself reads it inconclusive (suite.verdict_rule.assess).

Prints Markdown: per GPU its table, pooled coverage, the claims under half and the acceptance;
then, with several GPUs, one summary row per GPU. With --out also writes them, the per-claim rows
of every GPU as a CSV beside it (same name, .csv) and the per-GPU summary (-summary.csv).
Exit status 1 when any claim's verdict differs between runs of one GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

from suite.claims import evaluate, load_claims
from suite.report.pergpu import gpu_name
from suite.verdict_rule import boundaries

ACCEPT_POOLED = 0.75  # pooled coverage the acceptance asks for
ACCEPT_CLAIM = 0.5  # and no claim with an interval below this
UNKNOWN_GPU = "unknown GPU"


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


def gpu_of(run: str) -> str:
    """The GPU in the env.json of a run directory (or beside its claims.json)."""
    p = Path(run)
    env = (p if p.is_dir() else p.parent) / "env.json"
    return gpu_name(json.loads(env.read_text())) if env.is_file() else UNKNOWN_GPU


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


def how_they_differ(verdicts: list[str]) -> str:
    """ "" where the verdicts agree; "not run in some" where a run has none; "inconclusive vs
    V" where the runs are inconclusive or V (one decisive verdict); else "contradict"."""
    kinds = set(verdicts)
    if len(kinds) == 1:
        return ""
    if kinds & {"not-run", "missing"}:
        return "not run in some"
    decisive = kinds - {"inconclusive"}
    return f"inconclusive vs {decisive.pop()}" if len(decisive) == 1 else "contradict"


def at_boundary(cid: str, runs: list[dict]) -> str:
    """Where the runs of a claim whose verdict differs split: the ledger boundary nearest any
    run's interval end (its value where it has no interval) and each run's nearest end, so a
    split of intervals that agree (ends either side of one boundary) reads apart from one of
    intervals that do not."""
    claim = next((c for c in load_claims() if c.id == cid), None)
    ends = [
        [x for x in (c.get("ci_low"), c.get("ci_high"), c.get("measured")) if _finite(x)]
        for c in runs
    ]
    if claim is None or not all(ends):
        return ""
    edges = [(b, name) for b, name in boundaries(claim) if math.isfinite(b)]
    if not edges:
        return ""
    b, name = min(edges, key=lambda e: min(abs(x - e[0]) for xs in ends for x in xs))
    nearest = [min(xs, key=lambda x: abs(x - b)) for xs in ends]
    return f"{name}; nearest ends " + ", ".join(f"{x:.3g}" for x in nearest)


def table(runs: list[str]) -> pd.DataFrame:
    """The per-claim table of runs of one GPU (see the module doc)."""
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
        row["how"] = how_they_differ(verdicts)
        row["split at"] = (
            "" if row["same"] == "yes" else at_boundary(cid, [c.get(cid, {}) for c in claims])
        )
        held, pairs = coverage(claims, cid)
        row["held"], row["pairs"] = held, pairs
        row["coverage"] = f"{held}/{pairs}" if pairs else "no interval"
        row["under half"] = "UNDER" if pairs and held / pairs < ACCEPT_CLAIM else ""
        rows.append(row)
    return pd.DataFrame(rows)


def by_gpu(runs: list[str]) -> dict[str, list[str]]:
    """The runs grouped by their GPU, in the order given."""
    groups: dict[str, list[str]] = {}
    for r in runs:
        groups.setdefault(gpu_of(r), []).append(r)
    return groups


def verdict(df: pd.DataFrame) -> dict:
    """One GPU's summary: pooled coverage, the claims under half, those whose verdict differs,
    and whether the acceptance holds."""
    held, pairs = int(df["held"].sum()), int(df["pairs"].sum())
    under = df.loc[df["under half"] != "", "claim"].tolist()
    share = held / pairs if pairs else math.nan
    return {
        "claims with an interval": int((df["pairs"] > 0).sum()),
        "held": held,
        "pairs": pairs,
        "pooled": f"{held}/{pairs} ({100 * share:.0f}%)" if pairs else "no interval",
        "claims under half": ", ".join(under) or "none",
        "verdicts differ": ", ".join(df.loc[df["same"] != "yes", "claim"]) or "none",
        "contradict": ", ".join(df.loc[df["how"] == "contradict", "claim"]) or "none",
        "acceptance": "met" if pairs and share >= ACCEPT_POOLED and not under else "NOT met",
    }


def pooled(df: pd.DataFrame) -> str:
    s = verdict(df)
    share = s["pooled"].partition(" ")[2]
    return (
        f"pooled coverage: {s['held']}/{s['pairs']}{' ' + share if share else ''} of ordered "
        f"run pairs, over {s['claims with an interval']} claims with an interval: how often one "
        f"run's 95% interval holds another run's value"
    )


def acceptance(df: pd.DataFrame) -> str:
    s = verdict(df)
    return (
        f"acceptance (pooled >= {100 * ACCEPT_POOLED:.0f}%, no claim under "
        f"{100 * ACCEPT_CLAIM:.0f}%): {s['acceptance']}; claims under half: "
        f"{s['claims under half']}; verdicts that differ: {s['verdicts differ']} (decisive "
        f"verdicts that contradict: {s['contradict']})"
    )


def report(groups: dict[str, list[str]]) -> tuple[str, pd.DataFrame, pd.DataFrame]:
    """(Markdown, per-claim rows of every GPU, one summary row per GPU)."""
    parts, frames, summary = [], [], []
    for gpu, runs in groups.items():
        df = table(runs)
        md = df.drop(columns=["held", "pairs"]).to_markdown(index=False)
        md += f"\n\n{pooled(df)}\n\n{acceptance(df)}"
        if len(groups) > 1:
            md = f"### {gpu} ({len(runs)} runs)\n\n{md}"
        parts.append(md)
        frames.append(df.assign(gpu=gpu, runs=len(runs)))
        summary.append({"gpu": gpu, "runs": len(runs), **verdict(df)})
    rows = pd.concat(frames, ignore_index=True)
    rows = rows[["gpu", "runs", *(c for c in rows.columns if c not in ("gpu", "runs"))]]
    per_gpu = pd.DataFrame(summary)
    if len(groups) > 1:
        shown = per_gpu.drop(columns=["held", "pairs"]).to_markdown(index=False)
        parts.append(f"### Per GPU\n\n{shown}")
    return "\n\n".join(parts), rows, per_gpu


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("runs", nargs="+", help="run directories (or claims.json files)")
    ap.add_argument("--out", type=Path, help="write the Markdown here (and CSVs beside)")
    a = ap.parse_args(argv)
    md, rows, per_gpu = report(by_gpu(a.runs))
    print(md)
    if a.out:
        a.out.write_text(md + "\n")
        rows.to_csv(a.out.with_suffix(".csv"), index=False)
        per_gpu.to_csv(a.out.with_name(a.out.stem + "-summary.csv"), index=False)
    return 0 if (rows["same"] == "yes").all() else 1


if __name__ == "__main__":
    sys.exit(main())
