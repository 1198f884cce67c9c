"""How fast can the GPU move the fp32-out forward's bytes at all? (lab/LOG.md, C11)

The fp32-out forward reads x in bf16 and writes y in fp32: a third of its bytes read, two thirds
written. The kernel issue's target is a fraction of a plain copy (half read, half written). This
times, L2-cold with the suite's Timer, beside each other in one process:
  - copy:    a same-size bf16 -> bf16 copy of x ([B, N, D]), and the 2 GB copy;
  - convert: torch's bf16 -> fp32 conversion of x (y = x.float(): the op's exact read/write mix);
  - stream-KIND-LOOP: kernels/stream_convert.cu, the same byte mixes without arithmetic: KIND
    copy (bf16 -> bf16, 16-byte words), pair (bf16 -> fp32, a 16-byte load and two 16-byte
    stores 32 bytes wide per thread: the fused forward's pattern at D = 1536) or coal (an 8-byte
    load, one 16-byte store: each warp store 512 consecutive bytes); LOOP blk (a CTA per block
    of 256 * UNROLL items) or gs (grid-stride over whole waves); UNROLL loads in flight per
    thread (the best of 1, 2, 4, 8 is printed; each is in the CSV): how far the mix can go;
  - fused:   the fused fp32-out forward itself (per-sample modulation, as the kernel grid).
Usage (GPU): python lab/mixed_copy.py [--out DIR] [--widths 1536,3072,5120] [--n 65536]
Prints a table and writes DIR/mixed_copy.csv.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

UNROLLS = (1, 2, 4, 8)
KINDS = {"copy": 0, "pair": 1, "coal": 2}  # kernels/stream_convert.cu KIND
LOOPS = {"blk": "true", "gs": "false"}  # BLOCKED
STREAM_NAMES = [
    f"stream_convert<{u}, {k}, {b}>"
    for u in UNROLLS
    for k in KINDS.values()
    for b in LOOPS.values()
]


def _stream(x, out, unroll: int, kind: str, loop: str):
    """A launcher of kernels/stream_convert.cu: x (bf16, contiguous) into out (x's dtype for
    kind copy, else fp32); blk: one CTA of 256 threads per 256 * unroll items, gs: a grid of
    whole waves (8 CTAs per SM), grid-stride."""
    from suite.cuda.compile import compile_program, read_sources
    from suite.cuda.launch import device_arch, get_function, i64, launch, ptr, sm_count

    idx = x.device.index
    prog = compile_program(
        '#include "stream_convert.cu"\n',
        read_sources(["stream_convert.cu"]),
        STREAM_NAMES,
        device_arch(idx),
    )
    f = get_function(prog, f"stream_convert<{unroll}, {KINDS[kind]}, {LOOPS[loop]}>", idx)
    items = x.nbytes // (8 if kind == "coal" else 16)
    grid = -(-items // (256 * unroll))
    if loop == "gs":
        grid = max(1, min(grid, 8 * sm_count(idx)))
    return lambda _: launch(f, (grid, 1, 1), 256, idx, [ptr(x), ptr(out), i64(items)])


def _cases(x, e) -> dict:
    """name -> (timed function, bytes it moves) for one input x [B, N, D] in bf16."""
    import torch

    from suite.ops import adaln

    same = torch.empty_like(x)
    f32 = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    cases = {
        "copy": (lambda _: same.copy_(x), 2 * x.nbytes),
        "convert": (lambda _: f32.copy_(x), x.nbytes + f32.nbytes),
        "fused": (
            lambda _: adaln(x, e[:, 1:2], e[:, 0:1], out_dtype=torch.float32),
            x.nbytes + f32.nbytes,
        ),
    }
    for kind in KINDS:
        out, nbytes = (same, 2 * x.nbytes) if kind == "copy" else (f32, x.nbytes + f32.nbytes)
        for loop in LOOPS:
            for u in UNROLLS:
                cases[f"stream-{kind}-{loop}-u{u}"] = (_stream(x, out, u, kind, loop), nbytes)
    return cases


def check_stream(x) -> None:
    """The stream kernels' outputs are x and x.float() exactly (run before timing them)."""
    import torch

    same, f32 = torch.empty_like(x), torch.empty(x.shape, dtype=torch.float32, device=x.device)
    for kind in KINDS:
        out, want = (same, x) if kind == "copy" else (f32, x.float())
        for loop in LOOPS:
            for u in UNROLLS:
                out.zero_()
                _stream(x, out, u, kind, loop)(None)
                if not torch.equal(out, want):
                    raise SystemExit(
                        f"mixed_copy.py: stream {kind} {loop} u{u} gave a wrong result"
                    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="folder for mixed_copy.csv")
    ap.add_argument("--widths", default="1536,3072,5120", help="D values, comma-separated")
    ap.add_argument("--n", type=int, default=65536, help="sequence length N (B = 1)")
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args(argv)

    import pandas as pd
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("mixed_copy.py: needs a CUDA GPU (none found)")
    from suite.experiments.kernels import bench

    timer = bench.Timer(a.reps)
    copy_gbps, _ = bench.copy_bandwidth(timer)
    rows = []
    for D in (int(d) for d in a.widths.split(",")):
        g = torch.Generator(device="cuda").manual_seed(D)
        x = torch.randn(1, a.n, D, device="cuda", generator=g).to(torch.bfloat16)
        e = torch.randn(1, 6, D, device="cuda", generator=g) * 0.5
        bench.settle(x.nbytes, bench.SETTLE_MS)
        if x.nbytes % 16:
            raise SystemExit(f"mixed_copy.py: x of {x.nbytes} bytes is not whole 16-byte words")
        check_stream(x)
        cases = _cases(x, e)
        for name, (fn, nbytes) in cases.items():
            ms = statistics.median(timer.time(fn))
            gbps = nbytes / (ms * 1e-3) / 1e9
            rows.append(
                dict(
                    case=name,
                    D=D,
                    N=a.n,
                    bytes=nbytes,
                    ms_median=ms,
                    gbps=gbps,
                    pct_copy_bw=100 * gbps / copy_gbps,
                    copy_gbps=copy_gbps,
                )
            )
    t = pd.DataFrame(rows)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        t.to_csv(a.out / "mixed_copy.csv", index=False)
    print(f"2 GB copy: {copy_gbps:.0f} GB/s")
    t["kind"] = t.case.str.replace(r"-u\d+$", "", regex=True)  # the best UNROLL per stream case
    best = t.groupby(["D", "kind"]).pct_copy_bw.max().unstack()
    print(best.round(1).to_string())


if __name__ == "__main__":
    main()
