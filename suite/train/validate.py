"""Emulator validation on real GPUs.

python -m torch.distributed.run --nproc-per-node 2 -m suite.train.validate busbw --mbytes 400 \
    --out F.json
    all_reduce bus bandwidth (nccl-tests convention: busbw = bytes * 2 (n-1)/n / time), median
    of 20 timed calls after 5 warm-ups, for a buffer of the given size.
python -m suite.train.validate compare REAL_DIR EMULATED_DIR [--skip 2] [--csv F]
    per step: measured step time of the real run (max over ranks) against the emulator's
    composed step time for the same plan; prints and writes the relative errors.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd


def allreduce_busbw(device, mbytes: float = 256, reps: int = 20, warm: int = 5) -> dict:
    """all_reduce bus bandwidth in the current process group (nccl-tests convention: busbw =
    bytes * 2 (n-1)/n / time), median of `reps` timed calls after `warm` untimed ones. Every
    rank must call it; every rank gets the same dict (rank 0's timing, broadcast)."""
    import torch
    import torch.distributed as dist

    from suite.train.instrument import PhaseTimer

    n = int(mbytes * 2**20 // 4)
    buf = torch.ones(n, device=device)
    times = []
    for i in range(warm + reps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        dist.barrier()
        timer = PhaseTimer(device)  # CUDA events on a GPU, the host clock on CPU
        timer.mark("start")
        dist.all_reduce(buf)
        timer.mark("end")
        timer.finish()
        if i >= warm:
            times.append(timer.seconds("start", "end"))
    w = dist.get_world_size()
    t = float(np.median(times))
    res = [
        {"bytes": n * 4, "world": w, "median_s": t, "busbw_gbps": n * 4 * 2 * (w - 1) / w / t / 1e9}
    ]
    dist.broadcast_object_list(res, src=0)
    del buf
    return res[0]


def busbw(mbytes: float, out: str | None) -> dict:
    import torch.distributed as dist

    from suite.train.distributed import init_distributed

    d = init_distributed("auto")
    res = allreduce_busbw(d.device, mbytes)
    if d.rank == 0:
        print(json.dumps(res))
        if out:
            Path(out).write_text(json.dumps(res))
    dist.destroy_process_group()
    return res


def compare(real: str, emulated: str, skip: int = 2) -> pd.DataFrame:
    from suite.train.logs import read_logs, step_table

    r = step_table(read_logs(real), keys=["policy"])
    e = step_table(read_logs(emulated), keys=["policy"])
    m = r.merge(e, on="step", suffixes=("_real", "_emu"))
    m = m[m.step >= skip]
    if not (m.tokens_real == m.tokens_emu).all():
        raise ValueError("the real and emulated runs trained on different batches (tokens differ)")
    m["rel_err"] = m.step_s_emu / m.step_s_real - 1
    m["compute_rel_err"] = m.compute_max_s_emu / m.compute_max_s_real - 1
    return m[
        [
            "step",
            "tokens_real",
            "step_s_real",
            "step_s_emu",
            "rel_err",
            "compute_max_s_real",
            "compute_max_s_emu",
            "compute_rel_err",
            "collective_wait_mean_s_real",
            "optimizer_s_real",
        ]
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m suite.train.validate", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("busbw")
    b.add_argument("--mbytes", type=float, default=256)
    b.add_argument("--out")
    c = sub.add_parser("compare")
    c.add_argument("real")
    c.add_argument("emulated")
    c.add_argument("--skip", type=int, default=2, help="warm-up steps left out")
    c.add_argument("--csv")
    a = ap.parse_args(argv)
    if a.cmd == "busbw":
        busbw(a.mbytes, a.out)
        return 0
    m = compare(a.real, a.emulated, a.skip)
    if a.csv:
        m.to_csv(a.csv, index=False)
    print(m.to_string(index=False))
    tot = m.step_s_emu.sum() / m.step_s_real.sum() - 1
    print(
        f"mean |step error| {100 * m.rel_err.abs().mean():.1f}%, total-time error {100 * tot:+.1f}%"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
