"""Command-line entry points: `python -m suite simulate | forecast` (fit-cost: fit_cost_cli).

Each function takes argv (without the command name) and returns an exit code; errors print one
line naming what was wrong and return 2, before any simulation where they can be known then:
arguments, the output path, the inputs, the work limit (suite.balance.limits) and samples that
exceed M_mem.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import pandas as pd

from suite.balance.cli_inputs import MANIFEST_HELP, forecast_jobs, read_latency
from suite.balance.cli_inputs import data_buckets as _buckets
from suite.balance.cli_inputs import load_cost as _load_cost
from suite.balance.costmodel import (
    CostModel,
)
from suite.balance.limits import LIMIT_HELP, check_work
from suite.balance.registry import OWN, PEERS, POLICIES, PolicyInputs, budgets, make_policy
from suite.balance.simulator import (
    CORPUS_CAP,
    SimConfig,
    auto_steps,
    estimate_seconds,
    simulate,
)
from suite.cli_args import check_writable, real, whole
from suite.progress import Progress

LONG_S = 5.0  # simulate prints its estimate on stderr when the work looks longer than this

METRIC_LABELS = {
    "rank_cv": "rank CV",
    "rank_cv_p99": "rank CV p99",
    "maxmean": "max/mean",
    "maxmean_p99": "max/mean p99",
    "bubble": "bubble",
    "step_cv": "step CV",
    "throughput": "tokens/s",
    "floor_p5": "p5 tokens/s",
    "planner_ms": "planner ms",
}
PERCENT = ("rank_cv", "rank_cv_p99", "bubble", "step_cv")  # fractions, printed as percent
PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def _make_policies(names: list[str], cost: CostModel, buckets: pd.DataFrame) -> dict:
    """name -> its policy, or why it does not apply to this data."""
    out = {}
    for name in names:
        try:
            out[name] = make_policy(name, PolicyInputs.from_cost(cost, buckets))
        except ValueError as e:
            out[name] = str(e)
    return out


def _forecast_one(name: str, pol, cost: CostModel, buckets: pd.DataFrame, cfg: SimConfig):
    """(name, its table row), or (name, why it does not apply to this data)."""
    if isinstance(pol, str):
        return name, pol
    return name, {
        "policy": name,
        **budgets(pol),
        **simulate(buckets, pol, cost.step_model(), cfg).metrics(),
    }


def _forecast_all(pols: dict, jobs: int, *args):
    """(name, row or why not) for every policy, as each finishes; `jobs` processes at once."""
    if jobs == 1:
        yield from (_forecast_one(n, p, *args) for n, p in pols.items())
        return
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        futs = [pool.submit(_forecast_one, n, p, *args) for n, p in pols.items()]
        for fut in as_completed(futs):
            yield fut.result()


def _policy_names(arg: str | None) -> list[str]:
    """The --policies list, each checked against the registry; None: every policy."""
    if arg is None:
        return list(POLICIES)
    names = [s.strip() for s in arg.split(",") if s.strip()]
    unknown = [s for s in names if s not in POLICIES]
    if unknown or not names:
        raise ValueError(
            f"--policies: unknown policy {', '.join(map(repr, unknown)) or 'list (empty)'}; "
            f"accepted: {', '.join(POLICIES)}"
        )
    return list(dict.fromkeys(names))


def cost_line(path: str | None, cost: CostModel) -> str:
    """Which cost the numbers stand on and where it comes from: the default, a run folder (run,
    GPU, commit), or a cost JSON (its path, its source and, where the file sits in a run folder,
    that run's GPU and commit)."""
    if not path:
        return f"cost: the default, {cost.source}"
    if os.path.isdir(path):
        return f"cost: run {cost.source}"
    line = f"cost: {path} ({cost.source or 'no source recorded'})"
    for up in list(Path(path).resolve().parents)[:3]:
        if (up / "env.json").is_file():
            from suite.balance.fit_table import run_name

            return f"{line}, in run {run_name(up)}"
    return line


def _step_name(cost: CostModel) -> str:
    return "quadratic a + c*B + b*B*S + d*B*S^2" if cost.quadratic else "power law a + b*B*S^p"


def _sim_args(
    p: argparse.ArgumentParser, steps_help: str = "simulated steps N (default 1000)"
) -> None:
    p.add_argument(
        "--gpus",
        type=whole(1),
        default=16,
        help="number of data-parallel ranks R (>= 1; with --steps within the work limit below)",
    )
    p.add_argument("--steps", type=whole(1), default=None, help=steps_help)
    p.add_argument(
        "--cost",
        help="cost JSON from `fit-cost`, or a run folder with results/costmodel_fit.csv (e.g. "
        "reports/reference/h100/full-c2036da) (default: analytic Wan-14B on H200)",
    )
    p.add_argument(
        "--step-model",
        choices=("auto", "power"),
        default="auto",
        help="what simulated steps cost: auto = the cost JSON's quadratic form "
        "a + c*B + b*B*S + d*B*S^2 where it has one (fit-cost writes it), else its power law; "
        "power = always the power law a + b*B*S^p",
    )
    p.add_argument(
        "--noise",
        type=real(0),
        default=0.05,
        help="per-sample multiplicative noise CV (default 0.05)",
    )
    p.add_argument(
        "--collective-s",
        type=real(0),
        default=0.0,
        help="non-overlapped collective seconds per step (default 0)",
    )
    p.add_argument(
        "--optimizer-s",
        type=real(0),
        default=None,
        help="optimizer seconds per step, charged once (default: the cost JSON's optimizer_s, "
        "which fit-cost writes where the sweep timed it apart, else 0)",
    )
    p.add_argument("--seed", type=whole(0), default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def _config(a, cost: CostModel, steps: int | None = None) -> SimConfig:
    return SimConfig(
        ranks=a.gpus,
        steps=next(s for s in (steps, a.steps, 1000) if s is not None),
        noise_cv=a.noise,
        collective_s=a.collective_s,
        optimizer_s=cost.optimizer_s if a.optimizer_s is None else a.optimizer_s,
        seed=a.seed,
    )


def simulate_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m suite simulate",
        description="Simulate R synchronous data-parallel ranks for N steps under a batching "
        "policy and print rank CV, max/mean, bubble, step CV and throughput. Work limit: "
        + LIMIT_HELP
        + ".",
    )
    p.add_argument(
        "--policy",
        choices=list(POLICIES),
        default="dual",
        help="batching policy (suite.balance.registry); default dual",
    )
    p.add_argument(
        "--manifest",
        help="your dataset (default: the synthetic mix): " + MANIFEST_HELP,
    )
    p.add_argument(
        "--mix",
        choices=("default", "long-video"),
        default="default",
        help="synthetic mix when no manifest is given",
    )
    p.add_argument(
        "--latency",
        help="measured per-shape latency CSV (B, S, step_s): micro-batches of a measured shape "
        "cost its median, other shapes the cost model's step model",
    )
    _sim_args(p)
    a = p.parse_args(argv)
    try:
        cost = _load_cost(a.cost, a.step_model)
        buckets, data = _buckets(a.manifest, a.mix, a.seed, cost.m_mem)
        pol = make_policy(a.policy, PolicyInputs.from_cost(cost, buckets))
        timing = cost.step_model()
        if a.latency:
            from suite.balance.simulator import LatencyTable

            timing = LatencyTable(read_latency(a.latency), fallback=timing)
        cfg = _config(a, cost)
        check_work(buckets, pol, cfg.ranks, cfg.steps)
        t0 = time.perf_counter()
        if (eta := estimate_seconds(buckets, pol, cfg)) > LONG_S:
            print(
                f"simulate: {a.policy} on {cfg.ranks} ranks x {cfg.steps} steps, about {eta:.0f} s",
                file=sys.stderr,
                flush=True,
            )
        m = simulate(buckets, pol, timing, cfg).metrics()
        if eta > LONG_S:
            print(f"simulate: done in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    except (ValueError, OSError, KeyError) as e:
        return _fail(str(e))
    out = {
        "policy": a.policy,
        "gpus": a.gpus,
        "steps": cfg.steps,
        "data": data,
        "m_mem": cost.m_mem,
        "m_comp": getattr(pol, "m_comp", None),
        "p": cost.p,
        "step_model": _step_name(cost) if not a.latency else f"latency table {a.latency}",
        "cost": cost_line(a.cost, cost),
        **m,
    }
    if a.json:
        print(json.dumps(out, default=float))
    else:
        print(
            f"{a.policy} on {a.gpus} ranks x {cfg.steps} steps, {data}, p = {cost.p:.3f}, "
            f"steps costed by the {out['step_model']}"
        )
        print(out["cost"])
        for k, label in METRIC_LABELS.items():
            v = m[k]
            print(f"  {label:<14} {100 * v:8.2f} %" if k in PERCENT else f"  {label:<14} {v:10.3f}")
    return 0


def forecast_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m suite forecast",
        description="Forecast balance metrics of every policy of suite.balance.registry for your "
        "dataset on R ranks: the suite's own (" + ", ".join(OWN) + ") and the peers public "
        "training stacks ship (" + ", ".join(PEERS) + "), and recommend M_mem, M_comp and a "
        "policy among all of them (highest simulated throughput). Work limit: " + LIMIT_HELP + ".",
    )
    p.add_argument(
        "--manifest",
        required=True,
        help="your dataset: " + MANIFEST_HELP,
    )
    p.add_argument(
        "--plot",
        help="write a bar chart of the metrics to this .png, .svg or .pdf path (checked before "
        "the simulations)",
    )
    p.add_argument(
        "--policies",
        help="comma-separated policies to simulate (default: every one of the registry: "
        + ", ".join(POLICIES)
        + ")",
    )
    p.add_argument(
        "--jobs",
        type=whole(1),
        default=None,
        help="policies simulated at once, one process each (default: the machine's cores, "
        "fewer where their simulations together would pass the work limit)",
    )
    _sim_args(
        p,
        "simulated steps N (default: as many as one drawn corpus of "
        f"{CORPUS_CAP:,} samples holds, at most 1000 and at least 20: 1000 up to ~90 ranks "
        "for a video mix, fewer beyond, where each step averages over more ranks)",
    )
    a = p.parse_args(argv)
    try:
        names = _policy_names(a.policies)
        if a.plot:
            check_writable(a.plot, "--plot", PLOT_SUFFIXES)
        cost = _load_cost(a.cost, a.step_model)
        buckets, data = _buckets(a.manifest, "default", a.seed, cost.m_mem)
        steps = a.steps if a.steps is not None else auto_steps(buckets, cost.m_mem, a.gpus)
        cfg = _config(a, cost, steps)
        pols = _make_policies(names, cost, buckets)
        jobs = forecast_jobs(a.jobs, pols, buckets, cfg)
        progress = Progress(sys.stderr, force_plain=True)  # lines, no display thread to fork
        progress.log(
            f"forecast: {len(names)} policies on {cfg.ranks} ranks x {cfg.steps} steps"
            + ("" if a.steps is not None else " (auto; --steps to choose)")
            + f", {jobs} at a time"
        )
        t0, done = time.perf_counter(), {}
        for name, row in _forecast_all(pols, jobs, cost, buckets, cfg):
            done[name] = row
            took = time.perf_counter() - t0
            left = took / len(done) * (len(names) - len(done))
            progress.log(
                f"forecast: {len(done)}/{len(names)} {name} ({took:.1f} s so far"
                + (f", about {left:.0f} s left)" if len(done) < len(names) else ")")
            )
        rows = [done[n] for n in names if isinstance(done[n], dict)]
        skipped = [f"{n} ({done[n]})" for n in names if isinstance(done[n], str)]
        progress.close()
        if not rows:
            raise ValueError(f"no policy applies: {'; '.join(skipped)}")
    except (ValueError, OSError, KeyError) as e:
        return _fail(str(e))
    table = pd.DataFrame(rows)
    best = table.loc[table["throughput"].idxmax()]
    runner_up = table.drop(index=best.name).sort_values("throughput").iloc[-1:]
    kind = "the suite's own" if POLICIES[best["policy"]].own else "a peer's"
    why = (
        f"highest simulated throughput among {len(table)} policies ({kind}; "
        f"{best['throughput']:.4g} tokens/s, next {runner_up['policy'].iloc[0]} "
        f"{runner_up['throughput'].iloc[0]:.4g}) on {a.gpus} ranks"
        if len(table) > 1
        else "the only policy that applies"
    )
    rec = {
        "policy": best["policy"],
        "reason": why,
        "m_mem": cost.m_mem,
        "m_comp": None if pd.isna(best.get("m_comp")) else float(best["m_comp"]),
        "p": cost.p,
        "candidates": names,  # every policy asked for: simulated, or skipped with the reason
        "skipped": skipped,
    }
    if a.json:
        print(
            json.dumps(
                {
                    "data": data,
                    "gpus": a.gpus,
                    "steps": cfg.steps,
                    "step_model": _step_name(cost),
                    "cost": cost_line(a.cost, cost),
                    "policies": rows,
                    "recommend": rec,
                },
                default=float,
            )
        )
    else:
        print(
            f"forecast for {data} ({int(buckets['count'].sum())} samples, "
            f"{len(buckets)} sequence lengths) on {a.gpus} ranks x {cfg.steps} steps; steps "
            "costed by the "
            f"{_step_name(cost)}"
        )
        print(cost_line(a.cost, cost))
        show = table[["policy", *METRIC_LABELS]].copy()
        for k in PERCENT:  # fractions -> percent for reading
            show[k] = 100 * show[k]
        show = show.rename(
            columns={k: v + (" %" if k in PERCENT else "") for k, v in METRIC_LABELS.items()}
        )
        print(show.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        for s_ in skipped:
            print(f"skipped: {s_}")
        m_comp = (
            f", M_comp = {rec['m_comp']:.4g} (B*S^p, p = {cost.p:.3f})" if rec["m_comp"] else ""
        )
        print(f"recommend: policy {rec['policy']}, M_mem = {cost.m_mem:.0f} tokens{m_comp}: {why}")
    if a.plot:
        _plot(table, a.plot, f"{data}, {a.gpus} ranks")
    return 0


def _plot(table: pd.DataFrame, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3))
    axes = fig.subplots(1, 4)
    for ax, k in zip(axes, ("rank_cv", "maxmean", "bubble", "throughput")):
        palette = ["#c0392b", "#2e86c1", "#1b7f3b", "#8e44ad", "#d68910", "#566573"]
        ax.bar(table["policy"], table[k], color=[palette[i % 6] for i in range(len(table))])
        ax.set_title(METRIC_LABELS[k], fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(simulate_main(sys.argv[1:]))
