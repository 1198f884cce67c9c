"""`python -m torch.distributed.run --nproc-per-node K -m suite.train ...` (torchrun; plain
`python -m suite.train` for one rank).

Argument and input errors (a bad number, an unwritable --out, a malformed --manifest or --cost,
a device this machine lacks) print one line and exit 2 before the model is built."""

from __future__ import annotations

import argparse
import os
import sys

from suite.balance.costmodel import P_BOUNDS
from suite.balance.registry import POLICIES
from suite.cli_args import check_writable, real, whole
from suite.data.corpus import MIXES
from suite.model.wan import ADALN, CONFIGS, DTYPES
from suite.train.trainer import TrainArgs

EPILOG = """\
examples:
  # two CPU processes (gloo), diffusers' Wan transformer at the tiny config, the dual policy
  python -m torch.distributed.run --nproc-per-node 2 -m suite.train --model tiny --mix tiny \\
      --dtype fp32 --policy dual --steps 5 --device cpu --out runs/t
  # one H200: Wan 2.1 1.3B with 4 of its 30 blocks, checkpointing, 16 virtual ranks one after another
  python -m suite.train --model wan-1.3b --layers 4 --checkpointing --policy dual --steps 20 \\
      --emulate-ranks 16 --cost runs/cost.json --out runs/dual16
  # two GPUs, NCCL, FSDP2
  NCCL_NVLS_ENABLE=0 python -m torch.distributed.run --nproc-per-node 2 -m suite.train \\
      --model wan-1.3b --layers 4 --fsdp ...
(`python -m torch.distributed.run` is torchrun: it works wherever torch imports, also in a venv
that links torch in without its console scripts, as nox's sessions do.)

model: diffusers' WanTransformer3DModel from the Wan 2.1 configs (tiny: 2 blocks, D = 32, for
CPU tests; wan-1.3b: 30 blocks, D = 1536; wan-14b: 40 blocks, D = 5120), random init; bf16 is
the cast diffusers' loading does (its _keep_in_fp32_modules stay fp32).
outputs: OUT/config.json, OUT/rank<r>.jsonl (one line per step: compute_s, collective_wait_s,
optimizer_s, step_s, peak_mem_bytes, B, S, tokens, samples, bucket, micro_batches, loss, ...),
OUT/steps.csv and OUT/summary.csv (aggregated by suite.train.logs) written by rank 0 at the end;
with --emulate-ranks also OUT/micro.csv (step, rank, micro, B, S, weight, loss, compute_s).
Every policy yields one Plan (suite.balance.plan): per step and rank, micro-batches of one
sequence length with loss weights that sum to 1 over the step, so gradients are summed across
ranks (all_reduce SUM), never divided by the world size. Equal-token and dual give one batch per
rank (weight 1/world); global gives ranks different numbers of micro-batches (or none), weight
tokens / the step's tokens; its rows carry B = samples, S = tokens / B, bucket = longest S.
Noise per sample is keyed by (seed, sample, epoch): every policy trains a sample with the same noise.
"""


def parse(argv: list[str] | None = None) -> TrainArgs:
    ap = argparse.ArgumentParser(
        prog="python -m suite.train",
        description=__doc__.split("\n")[0]
        + "\nTrain diffusers' Wan 2.1 transformer with per-rank instrumentation.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--model", choices=list(CONFIGS), default="tiny", help="model configuration")
    ap.add_argument(
        "--layers", type=whole(1), help="number of transformer blocks (default: the config's)"
    )
    ap.add_argument(
        "--policy",
        choices=list(POLICIES),
        default="equal-token",
        help="batching policy, a row of suite.balance.registry.POLICIES: equal-token (B*S = "
        "M_mem), dual (M_mem, M_comp, p), global (per-step LPT over ranks, micro-batches of <= "
        "M_mem tokens, loss normalised by the global token count) and the peers (Open-Sora, "
        "VideoSys, verl/slime/Megatron packing); planner and pricing cost from --cost",
    )
    ap.add_argument("--steps", type=whole(1), default=10, help="training steps")
    ap.add_argument("--out", required=True, help="output folder for the logs")
    ap.add_argument(
        "--adaln",
        choices=list(ADALN),
        default="wan",
        help="AdaLN: wan (diffusers' own: LayerNorm and modulation in fp32) or fused "
        "(suite.ops.diffusers.patch_wan: the suite's fused op)",
    )
    ap.add_argument("--fsdp", action="store_true", help="FSDP2 (fully_shard) instead of DDP")
    ap.add_argument(
        "--emulate-ranks",
        type=whole(0),
        default=0,
        metavar="R",
        help="emulate R data-parallel ranks in this one process (one GPU)",
    )
    ap.add_argument(
        "--mix", choices=[*MIXES, "tiny"], default="default", help="synthetic corpus mix"
    )
    ap.add_argument(
        "--manifest", help="a manifest (CSV/JSONL/Parquet with height, width[, frames])"
    )
    ap.add_argument("--corpus-size", type=whole(1), default=20000, help="synthetic corpus samples")
    ap.add_argument("--cost", help="cost JSON (python -m suite fit-cost) giving p, M_mem, M_comp")
    ap.add_argument(
        "--m-mem",
        type=real(0, open_lo=True),
        help="memory budget, tokens per batch (also equal-token's M_tok)",
    )
    ap.add_argument("--m-comp", type=real(0, open_lo=True), help="compute budget B*S^p")
    ap.add_argument("--p", type=real(*P_BOUNDS), help="cost exponent p")
    ap.add_argument("--seed", type=whole(0), default=0)
    ap.add_argument("--lr", type=real(0, open_lo=True), default=1e-4)
    ap.add_argument(
        "--dtype",
        choices=list(DTYPES),
        default="bf16",
        help="parameter dtype: bf16 as diffusers casts it (fp32 kept modules) or fp32",
    )
    ap.add_argument(
        "--checkpointing",
        action="store_true",
        help="gradient checkpointing per block (diffusers' enable_gradient_checkpointing), as "
        "Wan training uses it",
    )
    ap.add_argument(
        "--text-len", type=whole(1), help="text tokens per sample (default: 512; 8 for tiny)"
    )
    ap.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    ap.add_argument(
        "--collective-busbw-gbps",
        type=real(0, open_lo=True),
        default=350.0,
        help="emulation only: all-reduce bus bandwidth for the collective cost model",
    )
    a = ap.parse_args(argv)
    return TrainArgs(**{k: v for k, v in vars(a).items()})


def check_inputs(args: TrainArgs) -> None:
    """What can be known wrong before the model is built, as a ValueError naming the argument or
    file: the output folder, the cost JSON, the manifest, the device and the launch."""
    import torch

    from suite.balance.costmodel import CostModel
    from suite.data.manifest import read_manifest

    check_writable(args.out, "--out", folder=True)
    if args.cost:
        CostModel.load(args.cost)
    if args.manifest:
        read_manifest(args.manifest, note=lambda _: None)  # the trainer prints the note
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: this machine has no CUDA device; use --device cpu")
    if args.fsdp and "RANK" not in os.environ:
        raise ValueError(
            "--fsdp needs a distributed launch: python -m torch.distributed.run "
            "--nproc-per-node K -m suite.train ... --fsdp"
        )


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        check_inputs(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.emulate_ranks:
        from suite.train.emulate import emulate_run

        out = emulate_run(args)
    else:
        from suite.train.trainer import train

        out = train(args)
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
