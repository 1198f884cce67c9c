"""The balance experiment's simulations (suite.experiments.balance documents the runs and tables).

Claim runs: the suite's own policies (registry.OWN) on RUNS and the scaling sweep, every plan
seed. Comparison (COMPARE): every registry policy on one corpus per (mix, ranks), drawn and
planned with seed 0 (common random numbers), for the profile's comparison steps; a policy that
cannot run at a rank count is skipped (its registry row's max_ranks), and a profile may leave out
policies whose planner is too slow for its time budget (its `skip`); every row says how many
steps ran. Rank sweep (balance_sweep_compare): the comparison on the default mix at every rank
count of `scales`, scale_steps(R) of the comparison's 16-rank steps (fewer at many ranks), with
each policy's throughput gain over the registry's baseline at the same ranks: where each policy
starts to pay.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from suite.balance.buckets import bucket_table
from suite.balance.costmodel import CostModel
from suite.balance.policies import crossover_for_m_comp, m_comp_for_crossover
from suite.balance.registry import PolicyInputs, baseline, make_policy, names, trait
from suite.balance.simulator import (
    NOISE_CV,
    SimConfig,
    corpus_size,
    draw_corpus,
    samples_per_rank_step,
    simulate,
    tune_s_cross,
)
from suite.data.corpus import sample_corpus

SCALES = (8, 16, 32, 64, 128, 256, 512, 1024)
PLANNER_COLUMNS = ["policy", "ranks", "mix", "noise", "draw", "planner_ms"]
CORPUS_SIZE = 100_000  # samples of each mix's bucket table
RANK_ROWS_STEPS = 1000
SIG_DIGITS = 6  # of the simulated times and CVs in balance_steps and balance_ranks
# (mix, ranks, noisy): the claim runs (every plan seed), with the run's per-sample noise CV or
# none ("cost"); the scaling sweep is added per SCALES
RUNS = (
    ("default", 8, True),
    ("default", 16, True),
    ("default", 16, False),
    ("long-video", 16, True),
)
COMPARE = (("default", 16), ("long-video", 16), ("default", 1024))  # noisy, plan seed 0
RANK_CAP_NOTE = "not run: {reason}, run up to {cap} ranks"  # a registry row's max_ranks
COMPARE_METRICS = (
    "rank_cv",
    "rank_cv_p99",
    "maxmean",
    "maxmean_p99",
    "bubble",
    "step_cv",
    "throughput",
    "planner_ms",
    "step_s_mean",
)


# the claim runs' policies: the suite's own; a packed variant of one of them (global-packed) is
# compared beside the peers, not re-run for every claim
CLAIM_POLICIES = names(own=True, packed=False)


def scale_steps(ranks: int, steps: int, rank_steps: int = 32_000) -> int:
    """Steps of a scaling-sweep run: `steps`, fewer at many ranks (about `rank_steps`
    rank-steps, at least steps / 20: 50 at 1024 ranks in the quick profile)."""
    return int(min(steps, max(steps // 20, rank_steps // ranks)))


def tune_dual(cost: CostModel, buckets: pd.DataFrame) -> tuple[float, pd.DataFrame]:
    """dual's s_cross on `buckets`, tuned by simulated throughput on the cost's step model over a
    fine geometric grid (tune_s_cross's default: the gain is a sawtooth in s_cross, one tooth per
    floor() step of a bucket's batch size, which a coarse grid samples at one tooth), keeping the
    power law's p; (s_cross, the grid's table)."""
    step = cost.step_model()
    return tune_s_cross(buckets, step, cost.m_mem, p=cost.p)


def policies(cost: CostModel, buckets: pd.DataFrame, wanted=None) -> dict:
    """The registry policies `wanted` (default: the suite's own) that apply to `buckets`, under
    one memory cap M_mem. Where the cost carries the sweep's quadratic fit, dual's s_cross is
    tuned on it for these buckets (tune_dual, keeping the power law's p), as training does;
    otherwise the fit's own M_comp (tuned on the power law where the fit has none)."""
    inputs = PolicyInputs.from_cost(cost, buckets)
    dual_inputs = inputs
    if cost.quadratic:
        inputs = replace(inputs, budgets=replace(inputs.budgets, m_comp=math.inf))
        if any(trait(n, "tunes_s_cross") for n in (CLAIM_POLICIES if wanted is None else wanted)):
            m_comp = m_comp_for_crossover(cost.m_mem, cost.p, tune_dual(cost, buckets)[0])
            dual_inputs = replace(inputs, budgets=replace(inputs.budgets, m_comp=m_comp))
    out = {}
    for name in CLAIM_POLICIES if wanted is None else wanted:
        try:
            out[name] = make_policy(name, dual_inputs if trait(name, "tunes_s_cross") else inputs)
        except ValueError:
            continue  # e.g. a sample longer than the global policy's cap
    return out


def _mixes(seed: int) -> dict[str, pd.DataFrame]:
    return {
        m: bucket_table(sample_corpus(CORPUS_SIZE, m, seed=seed).tokens)
        for m in ("default", "long-video")
    }


def simulate_tables(
    cost: CostModel,
    source: str,
    steps: int = 1000,
    seed: int = 0,
    scales=SCALES,
    draws: int = 1,
    progress=None,
    compare_steps: tuple[int, int] | None = None,
    rank_steps: int = 32_000,
    skip: tuple[str, ...] = (),
    skip_reason: str = "",
    noise_cv: float = NOISE_CV,
    noise_source: str = "assumed",
    workers: int = 1,
    optimizer_s: float = 0.0,
) -> dict[str, pd.DataFrame]:
    """All balance tables for one cost model (pure apart from the seeded simulation and the
    planner's wall time); steps cost what cost.step_model() says.

    Plan seed d (0 .. draws-1) of a claim run: one corpus drawn from the mix's bucket table by
    seed + d, planned with seed + d by every own policy (common random numbers); the scaling
    sweep runs seed 0 only. compare_steps = (steps at 16 ranks, steps at 1024 ranks) of the
    comparison (None: none), which leaves out the policies `skip`. Policies are tuned once, on
    the mixes' bucket tables. noise_cv: per-sample CV of compute (noise_source says where it
    came from). workers > 1 simulates the runs in that many processes; the tables are the same
    (each run is seeded on its own and the results are gathered in run order). optimizer_s: the
    optimizer step every simulated step pays once (cost then prices a micro-batch without it)."""
    mixes = _mixes(seed)
    truth = cost.step_model()
    own = CLAIM_POLICIES
    peers = tuple(n for n in names() if n not in own) if compare_steps else ()
    peers = [n for n in peers if n not in skip]
    skip_notes = {n: f"not run: left out of this profile ({skip_reason})" for n in skip}
    by_mix = {mix: policies(cost, b, (*own, *peers)) for mix, b in mixes.items()}
    runs = [(mix, R, noise_cv if noisy else 0.0, draws, steps) for mix, R, noisy in RUNS]
    runs += [
        ("default", R, noise_cv, 1, scale_steps(R, steps, rank_steps))
        for R in scales
        if R not in (8, 16)
    ]
    jobs = [
        (_claim_run, ({n: p for n, p in by_mix[mix].items() if n in own}, by_mix[mix],
                      mixes[mix], truth, mix, R, noise, n_draws, n_steps, seed, optimizer_s))
        for mix, R, noise, n_draws, n_steps in runs
    ]  # fmt: skip
    jobs += [
        (_compare, (by_mix[mix], mixes[mix], truth,
                    SimConfig(ranks=R, steps=compare_steps[R > 16], noise_cv=noise_cv, seed=seed,
                              optimizer_s=optimizer_s),
                    mix, skip_notes))
        for mix, R in (COMPARE if compare_steps else ())
    ]  # fmt: skip
    n_compare = len(jobs) - len(runs)
    jobs += [
        (_compare, (by_mix["default"], mixes["default"], truth,
                    SimConfig(ranks=R, steps=scale_steps(R, compare_steps[0], rank_steps),
                              noise_cv=noise_cv, seed=seed, optimizer_s=optimizer_s),
                    "default", skip_notes))
        for R in (scales if compare_steps else ())
    ]  # fmt: skip
    results = _map(jobs, workers, progress)
    ranks, steps_t, planner, compare = [], [], [], []
    for out in results[: len(runs)]:
        steps_t += out[0]
        ranks += out[1]
        planner += out[2]
    for out in results[len(runs) : len(runs) + n_compare]:
        compare += out
    sweep = [row for out in results[len(runs) + n_compare :] for row in out]
    return {
        "balance_ranks": _front(pd.concat(ranks, ignore_index=True), ORDER),
        "balance_steps": _front(pd.concat(steps_t, ignore_index=True), ORDER + ["draw"]),
        "balance_buckets": _buckets(mixes, by_mix),
        "balance_setup": _setup(cost, source, truth, by_mix, noise_cv, noise_source, optimizer_s),
        "balance_planner": pd.DataFrame(planner, columns=PLANNER_COLUMNS),
        "balance_compare": pd.DataFrame(compare, columns=COMPARE_COLUMNS),
        "balance_sweep_compare": rank_sweep_table(sweep),
    }


COMPARE_COLUMNS = ["policy", "mix", "ranks", "steps", "draw", *COMPARE_METRICS, "note"]


def rank_sweep_table(rows: list[dict]) -> pd.DataFrame:
    """The rank sweep's comparison rows with gain_pct: 100 * (throughput / the baseline's
    throughput at the same ranks - 1) (nan where either did not run)."""
    d = pd.DataFrame(rows, columns=COMPARE_COLUMNS)
    base = d[d["policy"] == baseline()].set_index("ranks")["throughput"]
    d["gain_pct"] = 100 * (d["throughput"] / d["ranks"].map(base) - 1)
    return d


ORDER = ["policy", "mix", "ranks", "noise"]


def _map(jobs: list, workers: int, progress) -> list:
    """[f(*args) for f, args in jobs], in order; in `workers` spawned processes when > 1 (spawn:
    the caller may hold a CUDA context, which a forked child must not inherit)."""
    if workers <= 1:
        out = []
        for i, (f, args) in enumerate(jobs):
            out.append(f(*args))
            if progress:
                progress(i + 1, len(jobs))
        return out
    import multiprocessing as mp
    import os
    from concurrent.futures import ProcessPoolExecutor

    from suite.stopping import die_with_parent

    spawn = mp.get_context("spawn")
    n = min(workers, len(jobs))
    # workers die with this process (suite.stopping): an interrupted run leaves none behind
    with ProcessPoolExecutor(n, spawn, die_with_parent, (os.getpid(),)) as ex:
        futures = [ex.submit(f, *args) for f, args in jobs]
        out = []
        for i, fut in enumerate(futures):
            out.append(fut.result())
            if progress:
                progress(i + 1, len(jobs))
        return out


def _claim_run(pols, all_pols, buckets, truth, mix, R, noise, n_draws, n_steps, seed, opt_s):
    """One claim run, every plan seed: (step frames, rank frames, planner rows)."""
    steps_t, ranks, planner = [], [], []
    per = max(samples_per_rank_step(p, buckets) for p in all_pols.values())
    for d in range(n_draws):
        cfg = SimConfig(ranks=R, steps=n_steps, noise_cv=noise, seed=seed + d, optimizer_s=opt_s)
        tokens = draw_corpus(buckets, corpus_size(buckets, cfg, per), seed + d)
        tag = {"mix": mix, "noise": "noisy" if noise else "cost", "draw": d}
        for name, pol in pols.items():
            res = simulate(tokens, pol, truth, cfg)
            steps_t.append(_sig(res.step_frame()).assign(**tag))
            if d == 0 and R in (8, 16):
                rf = _sig(res.rank_frame())
                ranks.append(rf[rf["step"] < RANK_ROWS_STEPS].assign(**tag))
            planner.append({"policy": name, "ranks": R, **tag, **res.extra})
    return steps_t, ranks, planner


def _sig(df: pd.DataFrame, digits: int = SIG_DIGITS) -> pd.DataFrame:
    """Float columns rounded to `digits` significant digits: simulated seconds carry no more, and
    the full profile's step table is half the size (what a device call can carry and return)."""
    out = df.copy()
    for c in out.select_dtypes("float").columns:
        x = out[c].to_numpy()
        mag = np.floor(np.log10(np.abs(np.where(x == 0, 1.0, x))))
        scale = 10.0 ** (digits - 1 - mag)
        out[c] = np.round(x * scale) / scale
    return out


def _compare(
    pols: dict, buckets: pd.DataFrame, truth, cfg: SimConfig, mix: str, skipped: dict
) -> list:
    """One row per policy of one comparison run: the simulator's metrics (module doc)."""
    key = {"mix": mix, "ranks": cfg.ranks, "draw": 0}
    capped = [n for n in pols if cfg.ranks > (trait(n, "max_ranks") or cfg.ranks)]
    rows = [  # what does not run says why
        {"policy": n, **key, "steps": 0, "note": RANK_CAP_NOTE.format(
            reason=trait(n, "max_ranks_reason"), cap=trait(n, "max_ranks"))}
        for n in capped
    ]  # fmt: skip
    rows += [{"policy": n, **key, "steps": 0, "note": reason} for n, reason in skipped.items()]
    pols = {n: p for n, p in pols.items() if n not in capped}
    per = max(samples_per_rank_step(p, buckets) for p in pols.values())
    tokens = draw_corpus(buckets, corpus_size(buckets, cfg, per), cfg.seed)
    for name, pol in pols.items():
        m = simulate(tokens, pol, truth, cfg).metrics()
        rows.append(
            {"policy": name, **key, "steps": cfg.steps, "note": ""}
            | {k: m[k] for k in COMPARE_METRICS}
        )
    return rows


def _buckets(mixes: dict, by_mix: dict) -> pd.DataFrame:
    rows = [
        bucket_table(b["S"].repeat(b["count"]), pol).assign(policy=name, mix=mix)
        for mix, b in mixes.items()
        for name, pol in by_mix[mix].items()
        if hasattr(pol, "batch_size")
    ]
    return _front(pd.concat(rows, ignore_index=True), ["policy", "mix"])


def _setup(
    cost: CostModel,
    source: str,
    truth,
    by_mix: dict,
    noise_cv: float,
    noise_source: str,
    optimizer_s: float,
) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "policy": name,
                "mix": mix,
                "m_mem": cost.m_mem,
                "m_comp": getattr(pol, "m_comp", np.nan),
                "p": cost.p,
                "s_cross": _s_cross(pol, cost),
                "cost_source": source,
                "step_model": truth.source if cost.quadratic else source,
                "noise_cv": noise_cv,
                "noise_source": noise_source,
                "a": cost.a,
                "b": cost.b,
                "optimizer_s": optimizer_s,
            }
            for mix, mpols in by_mix.items()
            for name, pol in mpols.items()
        ]
    )


def _s_cross(pol, cost: CostModel) -> float:
    """dual's crossover length M_comp = M_mem * s_cross^(p-1) solved for s_cross; the cost
    model's for the other policies."""
    m_comp = getattr(pol, "m_comp", None)
    if m_comp is None or cost.p == 1:
        return cost.s_cross
    return crossover_for_m_comp(cost.m_mem, cost.p, m_comp)


def _front(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    return df[cols + [c for c in df.columns if c not in cols]]
