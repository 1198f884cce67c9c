"""A small representative set of fused AdaLN calls for compute-sanitizer (memcheck, racecheck,
initcheck): every kernel (forward, fused and D-tile backward, finalize), vector and scalar paths,
row groups below and above a warp, per-sample / per-token / affine, B > 1, odd N, and one forward
with enough rows for the row-count rule's kernel (KernelConfig.fwd_many).

    python tools/adaln_sanitize.py [--variants default,round1,...|all] [--small]

(variants other than the shipped default come from the tuning lab, lab/variants.py)

Every input (x, modulation, dy) is made on the host and copied to the device (cudaMemcpy), never
written by a torch kernel: initcheck then tracks it as initialized even when it instruments only
our kernels (--kernel-name kns=adaln). In the 2026-12-01 run, inputs filled by torch's randn/.to
kernels (not instrumented under the filter) made every read of x look uninitialized, and the
unfiltered alternative instruments every torch kernel too and ran past its time limit.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from suite.ops import adaln, layer_norm_affine  # noqa: E402

CASES = [
    (2, 37, 1536, torch.bfloat16),
    (1, 5, 64, torch.float32),
    (2, 9, 1000, torch.float16),
    (1, 17, 4100, torch.bfloat16),
    (1, 3, 8192, torch.float32),
]
# configurations lab/device/kernel_variants.sh prebuilds; fp32 x at D = 1536 with odd N: the pair
# forward (adaln_fwd_r2) with a one-row pair per sample
SMALL = [CASES[0], CASES[1], CASES[3], (2, 37, 1536, torch.float32)]
# a forward with enough rows for KernelConfig.fwd_many's kernel (D = 3072, >= 16384 rows)
MANY_ROWS = (1, 49152, 3072, torch.bfloat16)


def host(*shape, dtype=torch.float32, g=None) -> torch.Tensor:
    """Random values made on the CPU and copied to the GPU (no device kernel writes them)."""
    return torch.randn(*shape, generator=g).to(dtype).to("cuda")


def run_cases(cases, g) -> None:
    for B, N, D, dt in cases:
        x = host(B, N, D, dtype=dt, g=g).requires_grad_(True)
        e = host(B, 6, D, g=g).requires_grad_(True)
        for bwd in ("fused", "dtile"):
            for out in (None, torch.float32):
                y = adaln(x, e[:, 1:2], e[:, 0:1], out_dtype=out, backward=bwd)
                torch.autograd.grad(y, (x, e), host(*y.shape, dtype=y.dtype, g=g))
        # separate [B, D] tensors: the finalize's plain rows (with e above: rows of e's gradient)
        s, h = (host(B, D, g=g).requires_grad_(True) for _ in range(2))
        y = adaln(x, s, h)
        torch.autograd.grad(y, (x, s, h), host(*y.shape, dtype=y.dtype, g=g))
        t = host(B, N, D, dtype=dt, g=g).requires_grad_(True)
        t2 = host(B, N, D, dtype=dt, g=g)
        y = adaln(x, t, t2)
        torch.autograd.grad(y, (x, t), host(*y.shape, dtype=y.dtype, g=g))
        w = host(D, g=g).requires_grad_(True)
        y = layer_norm_affine(x, w, host(D, g=g))
        torch.autograd.grad(y, (x, w), host(*y.shape, dtype=y.dtype, g=g))
        xm = host(B * N * D + 1, dtype=dt, g=g)[1:].view(B, N, D)  # misaligned: scalar path
        adaln(xm, e[:, 1:2], e[:, 0:1])


def run_many_rows(g) -> None:
    """One forward launch large enough for the row-count rule's kernel (forward only: the
    backward has no such rule, and these sizes are slow under the sanitizers)."""
    B, N, D, dt = MANY_ROWS
    e = host(B, 6, D, g=g)
    adaln(host(B, N, D, dtype=dt, g=g), e[:, 1:2], e[:, 0:1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="default", help="comma list of variants, or 'all'")
    ap.add_argument("--small", action="store_true", help="3 cases instead of 5")
    a = ap.parse_args(argv)
    names = a.variants.split(",")
    select = lambda v: None  # noqa: E731  (the shipped kernels: no lab needed)
    if names != ["default"]:  # the tuning lab's variants (lab/variants.py)
        from lab.kernel_variants import VARIANTS
        from lab.variants import set_variant as select

        names = list(VARIANTS) if a.variants == "all" else names
    g = torch.Generator().manual_seed(0)
    for v in names:
        select(v)
        run_cases(SMALL if a.small else CASES, g)
        run_many_rows(g)
        torch.cuda.synchronize()
        print(f"sanitize cases done: variant {v}", flush=True)
    select("default")


if __name__ == "__main__":
    main()
