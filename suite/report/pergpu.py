"""Claims per GPU: one tidy row per (run, claim) read from run folders (claims.json, and env.json
for the GPU), and the per-claim x per-GPU table that marks the claims whose verdict differs between
GPUs. Why a verdict differs is written by people (README); this table only says where.

    runs = [load_run(p) for p in ("reports/reference/h200/quick-5753865", ...)]
    wide = per_gpu(pd.concat(runs))

Drawing (suite/report/plots/opening.py) and formatting (tools/readme_results.py) read these tables.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from suite.claims import load_claims
from suite.env import gpu_model

# one row per (run, claim); the ledger's direction says which way of the paper's value is better
COLUMNS = [
    "gpu",
    "run",
    "id",
    "claim",
    "paper_text",
    "paper_value",
    "direction",
    "unit",
    "verdict",
    "metric",
    "measured",
    "ci_low",
    "ci_high",
    "compile_verdict",
    "compile_value",
]
# what per_gpu shows per GPU; compile_*: the ledger's reading against torch.compile (C11-C13)
VALUES = ["verdict", "metric", "measured", "ci_low", "ci_high", "compile_verdict", "compile_value"]
NO_GPU = "CPU"


def gpu_name(env: Mapping) -> str:
    """The GPU a run ran on, without the vendor prefix ("H200"): torch's device name in env.json,
    else nvidia-smi's; "CPU" for a run without a CUDA GPU."""
    name = gpu_model(dict(env)) or ""
    return name.removeprefix("NVIDIA ").strip() or NO_GPU


def _number(x) -> float:
    """A claims.json number (JSON null for none) as a float, NaN for none."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return math.nan
    return x if math.isfinite(x) else math.nan


def claim_rows(claims: Iterable[Mapping], gpu: str, run: str) -> pd.DataFrame:
    """The tidy rows of one run's claims (claims.json records or Verdict.to_json() dicts)."""
    direction = {c.id: c.direction for c in load_claims()}
    rows = [
        {
            "gpu": gpu,
            "run": run,
            "id": c["id"],
            "claim": c.get("claim", ""),
            "paper_text": c.get("paper_text", ""),
            "paper_value": _number(c.get("paper_value")),
            "direction": direction.get(c["id"], ""),
            "unit": c.get("unit", "") or "",
            "verdict": c.get("verdict", "") or "",
            "metric": c.get("metric", "") or "",
            "measured": _number(c.get("measured")),
            "ci_low": _number(c.get("ci_low")),
            "ci_high": _number(c.get("ci_high")),
            "compile_verdict": c.get("compile_verdict", "") or "",
            "compile_value": _number(c.get("compile_value")),
        }
        for c in claims
    ]
    df = pd.DataFrame(rows, columns=COLUMNS)
    order = df["id"].str.lstrip("C").astype(int) if len(df) else df["id"]
    return df.iloc[order.argsort(kind="stable")].reset_index(drop=True)


def load_run(path: Path | str) -> pd.DataFrame:
    """claim_rows of a run folder: its claims.json, the GPU from its env.json, the folder's
    <gpu>/<kind>-<sha> tail as the run's name."""
    root = Path(path)
    missing = [f for f in ("claims.json", "env.json") if not (root / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"run folder {root}: no {' or '.join(missing)} (a run folder holds claims.json and "
            f"env.json, as `python -m suite reproduce` writes them)"
        )
    env = json.loads((root / "env.json").read_text(encoding="utf-8"))
    claims = json.loads((root / "claims.json").read_text(encoding="utf-8"))
    return claim_rows(claims, gpu_name(env), "/".join(root.parts[-2:]))


def gpus(long: pd.DataFrame) -> list[str]:
    """The GPUs of a tidy table in the order the per-GPU columns take (by name)."""
    return sorted(long["gpu"].unique())


def per_gpu(long: pd.DataFrame) -> pd.DataFrame:
    """One row per claim: id, claim, paper_text, and per GPU its verdict, metric, measured, ci_low,
    ci_high (columns "<gpu> verdict", ...); "differs" is True where the GPUs' verdicts differ.
    One run per GPU: two runs of one GPU are a stability question (tools/verdict_stability.py)."""
    runs = long.groupby("gpu")["run"].unique()
    twice = {g: list(r) for g, r in runs.items() if len(r) > 1}
    if twice:
        raise ValueError(
            f"runs: one run per GPU is accepted, got {twice}; compare repeated runs of one GPU "
            "with tools/verdict_stability.py"
        )
    first = long.drop_duplicates("id").set_index("id")[["claim", "paper_text"]]
    wide = first.copy()
    for gpu in gpus(long):
        mine = long[long["gpu"] == gpu].set_index("id")[VALUES]
        wide = wide.join(mine.rename(columns={c: f"{gpu} {c}" for c in VALUES}))
    verdicts = wide[[f"{g} verdict" for g in gpus(long)]]
    wide["differs"] = verdicts.nunique(axis=1, dropna=False) > 1
    return wide.reset_index()
