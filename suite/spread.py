"""Between-run spread of measured speedups, per GPU model: the kernel speedups (C11, C12) and the
end-to-end step gains (C17).

A run's interval holds its own repetition noise only. Another run of the same code on the same
GPU model reads differently: another unit has its own memory bandwidth (two H100s at one commit
read C11 8.85x and 8.80x, 0.6% apart, with bootstrap intervals 0.1% wide), each process lands at
its own level (three H100 runs of one commit on one unit read C17 5.87, 6.11 and 5.97%, each with
a paired interval ~0.3 points wide), and torch.compile's baselines land in a slower compiled
variant now and then (one H100 run of five read the fused forward 1.79x over compiled eager, the
others 1.67x). The model is a random effect per run: a speedup r of run k is r * exp(u_k) with
u_k ~ N(0, tau^2), tau per GPU model and family. The families keep apart what moves for different
reasons: the speedups over eager and the Wan path (the unit's bandwidth), those over
torch.compile (inductor's code as well), and the e2e gains.

run_spread.csv holds, per (GPU model, family, commit), tau as the pooled standard deviation of
log(speedup) across committed repeat runs of that commit (every metric of the family, each
centred on its own mean over the runs), with its degrees of freedom. tools/run_spread.py computes
a row from the runs' metrics.csv; its `units` column is a lower bound on the distinct GPUs the
runs used, so a row that cannot tell its runs' units apart says it may miss unit-to-unit spread.

A run is widened by tau pooled over the rows of every other commit (variances weighted by their
d.f.): never by its own commit's runs, so a committed run's coverage against its sibling runs is
checked out of sample, while a new run draws on every commit's runs.

A speedup's 95% interval is then, on each side, the wider of the run's own interval and
1.96 * tau in log space: two runs with that spread differ by more than 1.96 * tau about 17% of
the time, so one run's interval holds another's value about 83% of the time.

Which GPU and commit: a table's own `gpu` column (the kernel tables name it), else the one-row
table `run_env` the report builds from the run's env.json (gpu, commit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pandas as pd

from suite.env import gpu_model

TABLE = Path(__file__).with_name("run_spread.csv")
COLUMNS = ["gpu", "family", "commit", "runs", "units", "df", "tau_log", "source"]
Z = 1.96
# the one-row table of the run's GPU and commit (suite.report.build.run_env_table)
RUN_ENV = "run_env"


@dataclass(frozen=True)
class Family:
    claims: tuple[str, ...]
    unit: str  # "x": a speedup; "%": a throughput gain, speedup = 1 + gain / 100
    prefix: str = ""  # metric names it holds start with this
    # True: only the speedups over torch.compile; False: none of them; None: either
    over_compile: bool | None = None

    def holds(self, metrics: pd.DataFrame) -> pd.Series:
        name = metrics["metric"].astype(str)
        held = (
            metrics["claim"].isin(self.claims)
            & (metrics["unit"] == self.unit)
            & name.str.startswith(self.prefix)
        )
        if self.over_compile is not None:
            held &= name.map(over_compile) == self.over_compile
        return held

    def ratio(self, v: float) -> float:
        return v if self.unit == "x" else 1.0 + v / 100.0

    def value(self, r: float) -> float:
        return r if self.unit == "x" else (r - 1.0) * 100.0


def over_compile(metric: str) -> bool:
    """A kernel speedup over torch.compile (its name says compile)."""
    return "compile" in metric


FAMILIES = {
    "kernels": Family(("C11", "C12"), "x", over_compile=False),
    "kernels-compile": Family(("C11", "C12"), "x", over_compile=True),
    "e2e": Family(("C17",), "%", "e2e_gain_"),
}


def kernel_family(metric: str) -> str:
    return "kernels-compile" if over_compile(metric) else "kernels"


@cache
def spreads() -> pd.DataFrame:
    return pd.read_csv(TABLE, dtype={"commit": str})


def _same_commit(a: str | None, b: str | None) -> bool:
    return bool(a and b) and (a.startswith(b) or b.startswith(a))


def rows_of(gpu: str, family: str) -> pd.DataFrame:
    """The run_spread rows of GPU model `gpu` (nvidia-smi's name) and `family`, one per commit."""
    t = spreads()
    return t[(t["gpu"] == gpu) & (t["family"] == family)]


def spread_for(gpu: str, family: str, commit: str | None = None) -> dict | None:
    """`gpu`'s `family` spread pooled over the rows of every commit but `commit` (the run's own),
    as one row (runs and d.f. summed, tau from the d.f.-weighted variances, units the largest
    lower bound), or None where no other commit has one."""
    rows = rows_of(gpu, family)
    rows = rows[[not _same_commit(commit, str(c)) for c in rows["commit"]]]
    if rows.empty:
        return None
    df = int(rows["df"].sum())
    tau = math.sqrt(float((rows["df"] * rows["tau_log"] ** 2).sum()) / df)
    return dict(
        gpu=gpu, family=family, commit=", ".join(map(str, rows["commit"])),
        runs=int(rows["runs"].sum()), units=int(rows["units"].max()), df=df, tau_log=tau,
        source="; ".join(rows["source"]),
    )  # fmt: skip


def run_of(tables: dict[str, pd.DataFrame], table: str) -> tuple[str | None, str | None]:
    """(GPU model, commit) of the run `tables` came from: the table's own gpu column first."""
    env = tables.get(RUN_ENV)
    env = env.iloc[0].to_dict() if env is not None and not env.empty else {}
    t = tables.get(table)
    gpu = str(t["gpu"].iloc[0]) if t is not None and "gpu" in t.columns and len(t) else None
    gpu = gpu or (str(env["gpu"]) if env.get("gpu") else None)
    return gpu, (str(env["commit"]) if env.get("commit") else None)


def gpu_and_commit(env: dict) -> tuple[str | None, str | None]:
    """A run's env.json's GPU model (torch's device name, else nvidia-smi's) and commit; the
    commit is None for a run without a GPU."""
    gpu = gpu_model(env)
    git = env.get("git") if isinstance(env.get("git"), dict) else {}
    return (gpu, git.get("sha")) if gpu else (None, None)


def run_env(env: dict) -> pd.DataFrame:
    """The RUN_ENV table of a run's env.json: its GPU model and commit; empty without a GPU."""
    gpu, commit = gpu_and_commit(env)
    return pd.DataFrame([{"gpu": gpu, "commit": commit}] if gpu else [])


def between(tables: dict[str, pd.DataFrame], table: str, family: str) -> tuple[dict | None, str]:
    """(the pooled row that widens this run's `family` intervals or None, the model in words for
    the metric's conditions)."""
    gpu, commit = run_of(tables, table)
    if gpu is None:
        return None, "between runs: not included (the run does not name its GPU)"
    row = spread_for(gpu, family, commit)
    if row is None:
        if rows_of(gpu, family).empty:
            return None, f"between runs: not included (no committed repeat runs of {gpu})"
        return None, (
            f"between runs: not included (only this run's commit {commit} has repeat runs "
            f"estimating {gpu}'s spread)"
        )
    units = int(row["units"])
    of_units = (
        f"at least {units} GPU units"
        if units > 1
        else "GPUs not told apart, possibly one unit: unit-to-unit spread may be missing"
    )
    return row, (
        f"widened where narrower to +-{Z} x the between-run log SD {100 * row['tau_log']:.2f}% "
        f"of {gpu} ({int(row['runs'])} runs at {row['commit']} on {of_units}; "
        f"{int(row['df'])} d.f.; {row['source']})"
    )


def widen(value: float, lo: float, hi: float, tau_log: float) -> tuple[float, float]:
    """(lo, hi) of a speedup with each side at least Z * tau_log from value in log space; NaN
    ends stay NaN."""
    if not (math.isfinite(value) and value > 0 and math.isfinite(lo) and math.isfinite(hi)):
        return lo, hi
    reach = math.exp(Z * tau_log)
    return min(lo, value / reach), max(hi, value * reach)


def widen_in(family: str, value: float, lo: float, hi: float, row: dict | None):
    """widen() on the family's own axis (a % gain is widened as its speedup 1 + gain / 100)."""
    if row is None:
        return lo, hi
    f = FAMILIES[family]
    lo_r, hi_r = widen(f.ratio(value), f.ratio(lo), f.ratio(hi), float(row["tau_log"]))
    return f.value(lo_r), f.value(hi_r)


def pooled_tau(values: pd.DataFrame) -> tuple[float, int]:
    """(tau, d.f.): pooled SD of log(value) across runs (columns), each metric (row) centred on
    its own mean; rows with a missing run are left out."""
    logs = values.dropna().map(math.log)
    if logs.shape[1] < 2 or logs.empty:
        raise ValueError("need at least two runs and one metric with a value in every run")
    dev = logs.sub(logs.mean(axis=1), axis=0)
    df = logs.shape[0] * (logs.shape[1] - 1)
    return math.sqrt(float((dev**2).to_numpy().sum()) / df), df
