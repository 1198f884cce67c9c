"""The between-run spread of one family of speedups (kernels: C11, C12 over eager and the Wan
path; kernels-compile: C11, C12 over torch.compile; e2e: C17's step gains) of one GPU model, from
committed repeat runs of one commit: writes (or replaces) that model's row for that commit in
suite/run_spread.csv, which the kernels and e2e summaries widen their intervals with (pooled
over the other commits' rows: suite/spread.py).

    PYTHONPATH=. python tools/run_spread.py {kernels,kernels-compile,e2e} RUN RUN [RUN ...] [--check]

Each RUN is a run directory with metrics.csv and env.json (a stability run's folder). The runs
must be of one commit and one GPU model (env.json says; a run without a commit or a GPU name is
refused). `units` is a lower bound on the distinct GPUs the runs used (UUIDs where env.json
records them, else the copy rates of the runs' kernel tables). --check: exit 1 unless the table already
holds this row (CI keeps the committed table in step with its sources).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from suite import spread  # noqa: E402


def _env(run: Path) -> tuple[str, str, str | None]:
    """(commit, GPU name, UUID or None) from the run's env.json."""
    path = run / "env.json"
    if not path.is_file():
        raise SystemExit(f"{path}: missing (a run directory has env.json)")
    env = json.loads(path.read_text())
    name, sha = spread.gpu_and_commit(env)
    if not sha or not name:
        raise SystemExit(f"{path}: no commit or GPU name recorded")
    smi = env.get("nvidia_smi")
    uuid = (
        smi[0].get("uuid") if isinstance(smi, list) and smi and isinstance(smi[0], dict) else None
    )
    return str(sha), name, uuid


def _units(runs: list[Path], uuids: list[str | None]) -> int:
    """Distinct GPUs among the runs that say which they used: the UUID where env.json has it,
    else the copy rate of the run's kernel tables (units differ in memory bandwidth; a rate
    that repeats is taken for one unit). Runs that say neither are not counted: at least this
    many units."""
    seen = set()
    for run, uuid in zip(runs, uuids):
        if uuid:
            seen.add(uuid)
            continue
        for sub in ("results", "raw"):
            f = run / sub / "kernels_timings.csv"
            if f.is_file():
                seen.add(round(float(pd.read_csv(f)["copy_gbps"].iloc[0]), 1))
                break
    return len(seen)


def row(family: str, runs: list[Path]) -> dict:
    envs = [_env(r) for r in runs]
    if len({(c, g) for c, g, _ in envs}) != 1:
        raise SystemExit(f"runs of more than one commit or GPU model: {sorted(set(envs))}")
    commit, gpu = envs[0][0], envs[0][1]
    values = {}
    for r in runs:
        m = pd.read_csv(r / "metrics.csv")
        m = m[spread.FAMILIES[family].holds(m)]
        values[r.as_posix()] = m.set_index("metric")["value"].map(spread.FAMILIES[family].ratio)
    tau, df = spread.pooled_tau(pd.DataFrame(values))
    source = "; ".join(Path(r).resolve().relative_to(REPO).as_posix() for r in runs)
    return dict(
        gpu=gpu, family=family, commit=commit, runs=len(runs), units=_units(runs, [u for *_, u in envs]),
        df=df, tau_log=round(tau, 6), source=source,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("family", choices=sorted(spread.FAMILIES), help="which speedups")
    ap.add_argument("runs", nargs="+", type=Path, help="run directories of one commit and GPU")
    ap.add_argument("--check", action="store_true", help="only check the table holds this row")
    a = ap.parse_args(argv)
    if len(a.runs) < 2:
        ap.error("give at least two runs")
    new = row(a.family, a.runs)
    if a.check:
        have = spread.rows_of(new["gpu"], a.family)
        have = have[have["commit"] == new["commit"]].to_dict("records")
        ok = len(have) == 1 and all(
            math.isclose(have[0][c], new[c], abs_tol=1e-6)
            if c == "tau_log"
            else have[0][c] == new[c]
            for c in spread.COLUMNS
        )
        print(("holds" if ok else "does not hold") + f" {new}")
        return 0 if ok else 1
    table = spread.spreads()
    key = ["gpu", "family", "commit"]
    other = (table[key] != pd.Series({k: new[k] for k in key})).any(axis=1)
    table = pd.concat([table[other], pd.DataFrame([new])], ignore_index=True)
    table[spread.COLUMNS].to_csv(spread.TABLE, index=False, lineterminator="\n")
    print(f"{spread.TABLE.relative_to(REPO)}: {new}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
