"""One-GPU virtual-rank emulation of synchronous data parallelism.

Each step, the micro-batches of R virtual ranks (the same Plan a real R-rank run would train on)
run one after another on one device, with the same model, through suite.train.step.train_step:
each rank's forward + backward is timed on its own (CUDA events), its weighted gradients
accumulate (the plan's weights sum to 1 over the step: the data-parallel all_reduce SUM), then
one optimizer step runs and is timed. The synchronous step is composed as

    step_s = max_r compute_s[r] + collective_s + optimizer_s
    collective_wait_s[r] = (max_r' compute_s[r'] - compute_s[r]) + collective_s

collective_s is the gradient all-reduce, modelled as a ring all-reduce of the model's gradient bytes
G over R ranks: 2 (R - 1) / R * G / busbw + latency, with the bus bandwidth busbw measured by a real
NCCL all-reduce on two H200 (tools/device/train.sh writes it) or, without one, 350 GB/s, a typical
NCCL all-reduce bus bandwidth of 8 NVLink H100/H200 GPUs with NVLS off (an assumption; stated in
the rows as collective_model). What emulation leaves out: rank-to-rank noise of a real cluster
(clocks, thermals), compute/communication overlap, and the memory of gradients that a real rank
frees at zero_grad (here they stay allocated across the virtual ranks of one step).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pandas as pd
import torch

from suite.train.instrument import JsonlLog
from suite.train.step import train_step

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
    collective_s: float,
    run_info: dict | None = None,
    log=None,
    micro: list | None = None,
) -> pd.DataFrame:
    """Run every step of the Plan with its `plan.world` virtual ranks; returns the composed rank
    rows (run_info's columns added); each micro-batch's row (step, rank, micro, B, S, compute_s,
    ...) is appended to `micro` when given."""
    out = []
    for step in range(plan.steps):
        rec = train_step(model, opt, plan, step, corpus, ranks=range(plan.world), seed=seed)
        rows = pd.DataFrame(
            [{**r, "emulated": True, "optimizer_s": rec.optimizer_s, **(run_info or {})} for r in rec.ranks]
        )  # fmt: skip
        rows = compose_steps(rows, collective_s)
        if log is not None:
            for row in rows.to_dict("records"):
                log(row)
        if micro is not None:
            micro += [{**m, **(run_info or {})} for m in rec.micro]
        out.append(rows)
    return pd.concat(out, ignore_index=True)


def emulate_run(args) -> Path:
    """The CLI path (--emulate-ranks R): writes OUT/rank{r}.jsonl for every virtual rank and
    OUT/micro.csv (one row per micro-batch)."""
    from suite.rundir import write_json
    from suite.train.trainer import run_setup

    device = torch.device(
        "cuda"
        if (args.device == "auto" and torch.cuda.is_available()) or args.device == "cuda"
        else "cpu"
    )
    R = int(args.emulate_ranks)
    out = Path(args.out)
    model, opt, corpus, budgets, plan = run_setup(args, device, R)
    coll = collective_seconds(gradient_bytes(model), R, args.collective_busbw_gbps)
    write_json(
        out / "config.json",
        {**asdict(args), "world": R, "budgets": asdict(budgets), "collective_s": coll},
    )
    logs = [JsonlLog(out / f"rank{r}.jsonl") for r in range(R)]
    micro: list = []
    emulate(
        model, opt, corpus, plan, seed=args.seed, collective_s=coll,
        log=lambda rec: logs[rec["rank"]].write(rec), micro=micro,
    )  # fmt: skip
    for log in logs:
        log.close()
    pd.DataFrame(micro).to_csv(out / "micro.csv", index=False)
    return out
