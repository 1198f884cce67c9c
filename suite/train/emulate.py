"""One-GPU virtual-rank emulation of synchronous data parallelism.

Each step, the batches of R virtual ranks (the same plan a real R-rank run would train on) run one
after another on one device, with the same model; each one's forward + backward is timed on its
own (CUDA events), gradients accumulate with weight 1/R (exactly the data-parallel average), then
one optimizer step runs and is timed. The synchronous step is composed as

    step_s = max_r compute_s[r] + collective_s + optimizer_s
    collective_wait_s[r] = (max_r' compute_s[r'] - compute_s[r]) + collective_s

collective_s is the gradient all-reduce, modelled as a ring all-reduce of the model's gradient bytes
G over R ranks: 2 (R - 1) / R * G / busbw + latency, with the bus bandwidth busbw measured by a real
NCCL all-reduce on two H200 (tools/gpu_train.sh writes it) or, without one, 350 GB/s, a typical
NCCL all-reduce bus bandwidth of 8 NVLink H100/H200 GPUs with NVLS off (an assumption; stated in
the rows as collective_model). What emulation leaves out: rank-to-rank noise of a real cluster
(clocks, thermals), compute/communication overlap, and the memory of gradients that a real rank
frees at zero_grad (here they stay allocated across the virtual ranks of one step).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import torch

from suite.train.data import batch_columns, load_corpus, make_batch
from suite.train.instrument import JsonlLog, PhaseTimer, optimizer_step, peak_bytes, reset_peak
from suite.train.plan import budgets_for, make_plan
from suite.train.trainer import TrainArgs, build_model, forward_backward, noise_generator

DEFAULT_BUSBW_GBPS = 350.0
DEFAULT_LATENCY_S = 30e-6


def gradient_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def collective_seconds(
    grad_bytes: float,
    ranks: int,
    busbw_gbps: float = DEFAULT_BUSBW_GBPS,
    latency_s: float = DEFAULT_LATENCY_S,
) -> float:
    """Ring all-reduce time of grad_bytes over `ranks` (nccl-tests' bus-bandwidth convention)."""
    if ranks <= 1:
        return 0.0
    return 2 * (ranks - 1) / ranks * grad_bytes / (busbw_gbps * 1e9) + latency_s


def compose_steps(rows: pd.DataFrame, collective_s: float) -> pd.DataFrame:
    """Fill collective_wait_s and step_s of per-virtual-rank rows (needs step, compute_s, optimizer_s)."""
    rows = rows.copy()
    slowest = rows.groupby("step")["compute_s"].transform("max")
    opt = rows.groupby("step")["optimizer_s"].transform("max")
    rows["collective_wait_s"] = slowest - rows["compute_s"] + collective_s
    rows["step_s"] = slowest + collective_s + opt
    rows["collective_s"] = collective_s
    return rows


def emulate(
    model,
    opt,
    corpus: pd.DataFrame,
    plan,
    *,
    seed: int,
    dtype: str,
    policy: str,
    collective_s: float,
    run_info: dict | None = None,
    log=None,
) -> pd.DataFrame:
    """Run the plan (plan[step][rank] = indices) with virtual ranks; returns composed rank rows."""
    device = next(model.parameters()).device
    cfg = model.cfg
    rows = []
    for step, batches in enumerate(plan):
        R = len(batches)
        step_rows = []
        for r, idx in enumerate(batches):
            t0 = time.perf_counter()
            x0, ctx, info = make_batch(
                corpus, idx, text_len=cfg.text_len, text_dim=cfg.text_dim, seed=seed, device=device
            )
            data_s = time.perf_counter() - t0
            reset_peak(device)
            timer = PhaseTimer(device)
            timer.mark("start")
            loss = forward_backward(
                model, x0, ctx, noise_generator(device, seed, step, r), dtype, scale=1.0 / R
            )
            timer.mark("compute")
            timer.finish()
            fields = {
                **batch_columns(info),
                "loss": float(loss),
                "data_s": data_s,
            }
            step_rows.append(_rank_row(model, step, r, R, policy, fields, timer, run_info))
        rows.append(_finish_step(opt, step_rows, collective_s, device, log))
    return pd.concat(rows, ignore_index=True)


def _rank_row(model, step, r, R, policy, fields: dict, timer, run_info) -> dict:
    """One virtual rank's row: who ran what, the policy's own fields, its compute time and peak
    memory (read right after its compute), then the run's constant columns."""
    peak, reserved = peak_bytes(next(model.parameters()).device)
    cfg = model.cfg
    return {
        "step": step,
        "rank": r,
        "world": R,
        "policy": policy,
        "adaln": model.adaln,
        "model": cfg.name,
        "layers": cfg.num_layers,
        "dim": cfg.dim,
        "emulated": True,
        **fields,
        "compute_s": timer.seconds("start", "compute"),
        "peak_mem_bytes": peak,
        "peak_reserved_bytes": reserved,
        **(run_info or {}),
    }


def _finish_step(opt, step_rows: list[dict], collective_s: float, device, log) -> pd.DataFrame:
    """The optimizer step shared by every virtual rank (timed once), then the composed step."""
    timer = PhaseTimer(device)
    timer.mark("start")
    optimizer_step(opt, timer)
    for row in step_rows:
        row["optimizer_s"] = timer.seconds("start", "optimizer")
    composed = compose_steps(pd.DataFrame(step_rows), collective_s)
    if log is not None:
        for rec in composed.to_dict("records"):
            log(rec)
    return composed


def emulate_global(
    model,
    opt,
    corpus: pd.DataFrame,
    plan,
    *,
    seed: int,
    dtype: str,
    collective_s: float,
    policy: str = "global",
    run_info: dict | None = None,
    log=None,
) -> pd.DataFrame:
    """The global policy with virtual ranks (plan[step] = StepPlan of suite.balance): each virtual
    rank's micro-batches run one after another and are timed together as its compute_s; loss
    weights tokens / global tokens, so the accumulated gradient is the real run's all-reduced sum."""
    from suite.train import globalstep as gs

    device = next(model.parameters()).device
    cfg = model.cfg
    rows = []
    for step, st in enumerate(plan):
        R = len(st.ranks)
        step_rows = []
        for r, mbs in enumerate(st.ranks):
            t0 = time.perf_counter()
            batches = gs.rank_batches(
                corpus, mbs, text_len=cfg.text_len, text_dim=cfg.text_dim, seed=seed, device=device
            )
            data_s = time.perf_counter() - t0
            reset_peak(device)
            timer = PhaseTimer(device)
            timer.mark("start")
            info = gs.rank_backward(
                model, batches, seed=seed, step=step, global_tokens=st.global_tokens, dtype=dtype
            )
            timer.mark("compute")
            timer.finish()
            fields = {
                **gs.log_fields(info, mbs, corpus),
                "loss": info["loss"],
                "data_s": data_s,
                "global_tokens": st.global_tokens,
            }
            step_rows.append(_rank_row(model, step, r, R, policy, fields, timer, run_info))
        rows.append(_finish_step(opt, step_rows, collective_s, device, log))
    return pd.concat(rows, ignore_index=True)


def emulate_run(args: TrainArgs) -> Path:
    """The CLI path (--emulate-ranks R): writes OUT/rank{r}.jsonl for every virtual rank."""
    device = torch.device(
        "cuda"
        if (args.device == "auto" and torch.cuda.is_available()) or args.device == "cuda"
        else "cpu"
    )
    R = int(args.emulate_ranks)
    out = Path(args.out)
    model = build_model(args, device)
    corpus = load_corpus(args.corpus_size, args.mix, args.seed, args.manifest)
    budgets = budgets_for(
        corpus, cost_json=args.cost, m_mem=args.m_mem, m_comp=args.m_comp, p=args.p
    )
    if args.policy == "global":
        from suite.train import globalstep as gs

        plan = gs.global_plan(
            corpus, gs.planner_cost(args.cost, budgets.p), budgets.m_mem, R, args.steps, args.seed
        )
    else:
        plan = make_plan(corpus, budgets.policy(args.policy), R, args.steps, args.seed)
    coll = collective_seconds(gradient_bytes(model), R, args.collective_busbw_gbps)
    from suite.rundir import write_json

    write_json(
        out / "config.json",
        {**asdict(args), "world": R, "budgets": asdict(budgets), "collective_s": coll},
    )
    logs = [JsonlLog(out / f"rank{r}.jsonl") for r in range(R)]
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    run = emulate_global if args.policy == "global" else emulate
    run(
        model,
        opt,
        corpus,
        plan,
        seed=args.seed,
        dtype=args.dtype,
        policy=args.policy,
        collective_s=coll,
        log=lambda rec: logs[rec["rank"]].write(rec),
    )
    for log in logs:
        log.close()
    return out
