"""GPU tests of the tuning lab's kernel variants (lab/kernel_variants.py) against the default
kernels and float64: bitwise agreement where a variant keeps each row's additions in the same
order, rounding-level agreement elsewhere. Not in CI's testpaths:
`python -m pytest lab/tests/test_variants_gpu.py` on a GPU machine, from the repository root.
"""

from __future__ import annotations

import pytest
import torch

from lab.kernel_variants import VARIANTS
from lab.variants import set_variant
from suite.ops import adaln
from tests.test_adaln import TOL, check, poison, rand, ref64, rel

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def under_variants(variants, x, e, dy, out_dtype=None, poison_bytes=0) -> dict:
    """Per kernel variant: y and the gradients of x and of Wan's [B, 6, D] modulation e (scale
    and shift as [B, 1, D] chunks of it), each run with that variant selected (after poisoning
    poison_bytes of freed memory, when given)."""
    out = {}
    for v in variants:
        prev = set_variant(v)
        try:
            if poison_bytes:
                poison(poison_bytes)
            y = adaln(x, e[:, 1:2], e[:, 0:1], out_dtype=out_dtype)
            out[v] = (y.detach(), *torch.autograd.grad(y, (x, e), dy))
        finally:
            set_variant(prev)
    return out


@pytest.mark.parametrize("D", [3072, 5120])
def test_remat_is_bitwise(D):
    """Round 17's backward (x-hat and dy recomputed from the packed row, shared words) at the
    widths where it is the default: the same additions in the same order as bwd-r17's, so
    bitwise the same dx, dscale and dshift."""
    x = rand(2, 300, D, dtype=torch.bfloat16).requires_grad_(True)
    e = rand(2, 6, D).requires_grad_(True)
    dy = rand(2, 300, D, dtype=torch.bfloat16)
    out = under_variants(("default", "bwd-r17"), x, e, dy)
    for i, (a, b) in enumerate(zip(out["default"], out["bwd-r17"])):
        assert torch.equal(a, b), (D, i)


def forward_kernels(fn) -> list[str]:
    """The fused forward kernels `fn` launches, by name (CUDA profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    cuda = torch.autograd.DeviceType.CUDA
    return [ev.name for ev in prof.events() if ev.device_type == cuda and "adaln_fwd" in ev.name]


@pytest.mark.parametrize("B,N", [(1, 49152), (2, 24577)])
def test_many_rows_forward_at_d_3072(B, N):
    """Launches of >= fwd_many_rows rows at D = 3072 (bf16, fp32 per-sample modulation) run
    another forward (round 21: two warps per row; round 28: two rows per row group), seen by
    name in the profiler: every row written (poisoned output), y against float64, mean and rstd
    feeding the backward; the same rows through the one-kernel rule (fwd-r20) agree. (Not by
    comparing bits: on an H100 the two kernels' outputs are bitwise equal.)"""
    x = rand(B, N, 3072, dtype=torch.bfloat16)
    e = rand(B, 6, 3072)
    check(x, e[:, 1], e[:, 0])
    run = lambda: adaln(x, e[:, 1], e[:, 0])  # noqa: E731
    many = forward_kernels(run)
    prev = set_variant("fwd-r20")
    try:
        one, old = forward_kernels(run), run()
    finally:
        set_variant(prev)
    assert many and all("adaln_fwd_r2<" in n for n in many), many
    assert one and not any("adaln_fwd_r2" in n for n in one), one
    assert rel(run(), old) < 1e-2


@pytest.mark.parametrize("D", [1536, 3072])
@pytest.mark.parametrize("B,N", [(1, 1), (2, 777)])
def test_fp32_out_forward_under_40_registers_is_bitwise(B, N, D):
    """Round 27: the fp32-out forward under a 40-register cap (the default at D = 3072: the same
    code, 8 CTAs per SM) writes every output (poisoned first) with bitwise the values of the
    64-register kernel before it (fwd-r26)."""
    x = rand(B, N, D, dtype=torch.bfloat16)
    e = rand(B, 6, D)
    ref = adaln(x, e[:, 1:2], e[:, 0:1], out_dtype=torch.float32)
    prev = set_variant("fwd-r26")
    try:
        poison(4 * B * N * D)
        y = adaln(x, e[:, 1:2], e[:, 0:1], out_dtype=torch.float32)
    finally:
        set_variant(prev)
    assert torch.equal(y, ref), rel(y, ref)


@pytest.mark.parametrize("name", [v for v in VARIANTS if v != "default"])
def test_variant_matches_default(name):
    """Variants that keep each row's additions in the same order give bitwise the default's rows:
    bwd-sm2 y and dx (another occupancy splits the rows over other CTAs, so dscale/dshift
    partials differ by rounding); fwd-v4: the default's kernel for this bf16-y case. round1
    agrees within rounding (it loads 8 elements per thread, so each thread adds its part of the
    row in another order)."""
    B, N, D = 2, 300, 1536
    x = rand(B, N, D, dtype=torch.bfloat16).requires_grad_(True)
    e = rand(B, 6, D).requires_grad_(True)
    dy = rand(B, N, D, dtype=torch.bfloat16)
    out = under_variants(("default", name), x, e, dy)
    exact = {"fwd-v4": (0, 1, 2), "bwd-sm2": (0, 1)}
    exact["bwd-r14"] = (0, 1, 2)  # the same additions through scalar shared words
    exact["bwd-r17"] = (0, 1, 2)  # the default's kernel at D = 1536 (test_remat_is_bitwise)
    exact["fwd-r26"] = (0, 1, 2)  # the bf16-y kernels are the default's
    exact = exact.get(name, ())
    for i, (a, b) in enumerate(zip(out["default"], out[name])):
        if i in exact:
            assert torch.equal(a, b), (name, i)
        else:
            assert rel(a, b) < 1e-2, (name, i, rel(a, b))


@pytest.mark.parametrize(
    "dtype,out,D,B,N",
    [
        (torch.float32, None, 1536, 3, 777),  # the default for fp32 x at D = 1536
        (torch.float32, None, 1536, 1, 1),
        (torch.bfloat16, None, 1536, 1, 16385),  # bf16 y at >= 16384 rows (fwd_many)
        (torch.bfloat16, None, 3072, 3, 5463),
        (torch.bfloat16, torch.float32, 1536, 3, 5463),  # fp32 y at >= 16384 rows (fwd_many)
    ],
)
def test_pair_forward(dtype, out, D, B, N):
    """Round 28: two rows of one sample per row group (adaln_fwd_r2). Odd N leaves each sample's
    last pair one row, and B = 3 puts pairs of several samples in one CTA: every output written
    (poisoned first), y within rounding of the one-row kernels (fwd-r27), mean and rstd through
    dx and the modulation's gradient too (1e-5, or 1e-4 for 16-bit tensors, where a 1e-8
    difference in fp32 flips the rounding of a few elements), and y against float64."""
    x = rand(B, N, D, dtype=dtype).requires_grad_(True)
    e = rand(B, 6, D).requires_grad_(True)
    dy = rand(B, N, D, dtype=out or dtype)
    res = under_variants(("fwd-p2", "fwd-r27"), x, e, dy, out, poison_bytes=4 * B * N * D)
    assert torch.isfinite(res["fwd-p2"][0]).all()
    for i, (a, b) in enumerate(zip(res["fwd-p2"], res["fwd-r27"])):  # 16-bit: an ulp flips
        assert rel(a, b) < (1e-5 if a.dtype == torch.float32 else 1e-4), (i, rel(a, b))
    ref = ref64(x.detach(), e[:, 1].detach(), e[:, 0].detach())
    assert rel(res["fwd-p2"][0], ref) < TOL[res["fwd-p2"][0].dtype]
