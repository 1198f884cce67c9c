"""The launches Nsight Compute profiles (lab/device/ncu.sh): for each variant and width, one
forward and one backward of the fused op on x [1, N, D] with Wan's per-sample fp32 modulation
(strided views of [1, 6, D]), in a fixed order. No warm-up: ncu replays each profiled kernel
with its caches flushed, so every launch is measured alike. --copy: also, per width, a torch
elementwise kernel that moves the forward's bytes (y = x * 1 in y's dtype: the same reads and
writes, no reductions), so a plain streaming kernel's profile sits beside the forward's (the D2D
memcpy that kernels.csv's `copy_same` times is not a kernel ncu can profile). --stream: also,
per width, lab/mixed_copy.py's bf16 -> fp32 stream kernels (`coal` and `pair`, a CTA per
block, one item per thread: the fastest of each), the fp32-out forward's bytes without its work.

    python lab/adaln_ncu_target.py --variants default,round1 --widths 1536,3072,5120 [--n 65536] \
        [--dtype bfloat16] [--out-dtype float32] [--copy] [--stream]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default="default")
    ap.add_argument("--widths", default="1536,3072,5120")
    ap.add_argument("--n", type=int, default=65536)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--out-dtype", choices=["bfloat16", "float32"], help="y's dtype (x's)")
    ap.add_argument("--copy", action="store_true", help="also y = x * 1: the same bytes")
    ap.add_argument("--stream", action="store_true", help="also the bf16 -> fp32 stream kernels")
    a = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        raise SystemExit("adaln_ncu_target.py: needs a CUDA GPU (torch sees none)")
    from lab.variants import set_variant
    from suite.ops import adaln

    dt = getattr(torch, a.dtype)
    ydt = getattr(torch, a.out_dtype or a.dtype)
    for variant in a.variants.split(","):
        set_variant(variant)
        for D in (int(d) for d in a.widths.split(",")):
            x = torch.randn(1, a.n, D, device="cuda", dtype=dt, requires_grad=True)
            mod = torch.randn(1, 6, D, device="cuda")
            dy = torch.randn(1, a.n, D, device="cuda", dtype=ydt)
            y = adaln(x, mod[:, 1:2], mod[:, 0:1], out_dtype=ydt)
            torch.autograd.grad(y, x, dy)
            torch.cuda.synchronize()
            print(f"launched: variant {variant} D {D} N {a.n} {a.dtype} -> {ydt}", flush=True)
    if a.copy:
        for D in (int(d) for d in a.widths.split(",")):
            x = torch.randn(1, a.n, D, device="cuda", dtype=dt)
            torch.mul(x, 1, out=torch.empty(x.shape, device="cuda", dtype=ydt))
            torch.cuda.synchronize()
            print(f"launched: y = x * 1, D {D} N {a.n} {a.dtype} -> {ydt}", flush=True)
    if a.stream:
        import importlib.util

        spec = importlib.util.spec_from_file_location(
            "mixed_copy", Path(__file__).resolve().parent.parent / "tools" / "mixed_copy.py"
        )
        mixed_copy = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mixed_copy)
        for D in (int(d) for d in a.widths.split(",")):
            x = torch.randn(1, a.n, D, device="cuda", dtype=torch.bfloat16)
            y = torch.empty(x.shape, device="cuda", dtype=torch.float32)
            for kind in ("coal", "pair"):
                mixed_copy._stream(x, y, 1, kind, "blk")(None)
                torch.cuda.synchronize()
                print(f"launched: stream {kind} blk u1, D {D} N {a.n}", flush=True)


if __name__ == "__main__":
    main()
