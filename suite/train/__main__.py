"""`torchrun --nproc-per-node K -m suite.train ...` (or plain `python -m suite.train` for one rank)."""

from __future__ import annotations

import argparse
import sys

from suite.model.config import CONFIGS
from suite.model.dit import ADALN_IMPLS
from suite.train.trainer import DTYPES, TrainArgs

EPILOG = """\
examples:
  # two CPU processes (gloo), tiny model, the dual-constraint policy
  torchrun --nproc-per-node 2 -m suite.train --model tiny --mix tiny --policy dual --steps 5 --out runs/t
  # one H200: wan-1.3b width, 4 layers, 16 virtual ranks emulated one after another
  python -m suite.train --model wan-1.3b --layers 4 --policy dual --steps 20 --emulate-ranks 16 \\
      --cost runs/cost.json --out runs/dual16
  # two GPUs, NCCL, FSDP2
  NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node 2 -m suite.train --model wan-1.3b --layers 4 --fsdp ...

outputs: OUT/config.json, OUT/rank<r>.jsonl (one line per step: compute_s, collective_wait_s,
optimizer_s, step_s, peak_mem_bytes, tokens, samples, bucket, loss, ...), OUT/steps.csv and
OUT/summary.csv (aggregated by suite.train.logs) written by rank 0 at the end.
Loss: mean over the batch's latent tokens on each rank; ranks' gradients are averaged equally.
--policy global: ranks run different numbers of micro-batches (or none); each one's loss is weighted
by its tokens / the step's global tokens and gradients are summed, so the gradient equals standard
data parallelism's over the whole global batch. Its rows carry B = samples, S = tokens / B,
bucket = longest S, micro_batches, sub_batches, sum_s2, global_tokens.
  torchrun --nproc-per-node 2 -m suite.train --model tiny --mix tiny --policy global --steps 5 --out runs/g
"""


def parse(argv: list[str] | None = None) -> TrainArgs:
    ap = argparse.ArgumentParser(
        prog="python -m suite.train",
        description=__doc__.split("\n")[0]
        + "\nTrain the Wan 2.1-style DiT with per-rank instrumentation.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--model", choices=list(CONFIGS), default="tiny", help="model configuration")
    ap.add_argument("--layers", type=int, help="override the number of DiT blocks")
    ap.add_argument(
        "--policy",
        choices=["equal-token", "dual", "global"],
        default="equal-token",
        help="batch-size policy: B*S = M_mem, the dual constraint (M_mem, M_comp, p), or "
        "global (per-step LPT over ranks, micro-batches of <= M_mem tokens, gradient "
        "accumulation, loss normalised by the global token count; planner cost from --cost)",
    )
    ap.add_argument("--steps", type=int, default=10, help="training steps")
    ap.add_argument("--out", required=True, help="output folder for the logs")
    ap.add_argument(
        "--adaln",
        choices=list(ADALN_IMPLS),
        default="wan",
        help="AdaLN implementation: wan (fp32 LN + fp32 modulation), eager (bf16), fused",
    )
    ap.add_argument("--fsdp", action="store_true", help="FSDP2 (fully_shard) instead of DDP")
    ap.add_argument(
        "--emulate-ranks",
        type=int,
        default=0,
        metavar="R",
        help="emulate R data-parallel ranks in this one process (one GPU)",
    )
    ap.add_argument(
        "--mix", default="default", help="synthetic corpus mix: default, long-video, tiny"
    )
    ap.add_argument(
        "--manifest", help="a manifest (CSV/JSONL/Parquet with height, width[, frames])"
    )
    ap.add_argument("--corpus-size", type=int, default=20000, help="synthetic corpus samples")
    ap.add_argument("--cost", help="cost JSON (python -m suite fit-cost) giving p, M_mem, M_comp")
    ap.add_argument(
        "--m-mem", type=float, help="memory budget, tokens per batch (also equal-token's M_tok)"
    )
    ap.add_argument("--m-comp", type=float, help="compute budget B*S^p")
    ap.add_argument("--p", type=float, help="cost exponent p")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--dtype", choices=list(DTYPES), default="bf16", help="autocast dtype")
    ap.add_argument(
        "--checkpointing", action="store_true", help="activation checkpointing per block"
    )
    ap.add_argument(
        "--text-len", type=int, help="text tokens per sample (default: the model's, 512)"
    )
    ap.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    ap.add_argument(
        "--collective-busbw-gbps",
        type=float,
        default=350.0,
        help="emulation only: all-reduce bus bandwidth for the collective cost model",
    )
    a = ap.parse_args(argv)
    if a.steps < 1:
        ap.error(f"--steps must be >= 1, got {a.steps}")
    return TrainArgs(**{k: v for k, v in vars(a).items()})


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.emulate_ranks:
        from suite.train.emulate import emulate_run

        out = emulate_run(args)
    else:
        from suite.train.trainer import train

        out = train(args)
    import os

    if int(os.environ.get("RANK", 0)) == 0:
        from suite.train.logs import read_logs, step_table, summary_table

        steps = step_table(read_logs(out))
        steps.to_csv(out / "steps.csv", index=False)
        summ = summary_table(steps)
        summ.to_csv(out / "summary.csv", index=False)
        print(summ.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
