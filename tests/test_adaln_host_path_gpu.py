"""GPU tests of the fused AdaLN op's thin host path (cached launch plans with packed argument
buffers, the per-signature validation cache, the no-grad and Wan-table fast paths): the
hold-out cases against float64, the fast path bitwise equal to the general path, plans reused
with new pointers, a CPU modulation refused before any launch with CUDA still working after,
CUDA-graph capture and side streams."""

from __future__ import annotations

import pytest
import torch

from suite.ops import adaln
from suite.ops.fused_adaln.args import slice_gradients
from tests.test_adaln_gpu import GTOL, TOL, rand, ref64, rel

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def wan(B, N, D, dtype=torch.bfloat16, offset=0):
    """x [B, N, D] (`offset` elements into its storage: misaligned for offset % 8) and Wan's fp32
    [B, 6, D] modulation, both needing gradients."""
    flat = rand(B * N * D + offset, dtype=dtype)
    x = flat[offset:].view(B, N, D).detach().requires_grad_(True)
    return x, rand(B, 6, D).requires_grad_(True), rand(B, N, D, dtype=dtype)


def fwd_bwd(x, e, dy, **kw):
    y = adaln(x, e[:, 1:2], e[:, 0:1], **kw)
    return (y.detach(), *torch.autograd.grad(y, (x, e), dy))


def test_cpu_modulation_raises_and_cuda_still_works():
    x = rand(2, 64, 1536, dtype=torch.bfloat16)
    e = torch.randn(2, 6, 1536)  # on the host
    with pytest.raises(ValueError, match=r"scale is on cpu but x is on cuda:0"):
        adaln(x, e[:, 1:2], e[:, 0:1])
    with pytest.raises(ValueError, match=r"shift is on cpu"):
        adaln(x, e[:, 1:2].cuda(), e[:, 0:1])
    torch.cuda.synchronize()  # no fault was queued
    ec = e.cuda()
    y = adaln(x, ec[:, 1:2], ec[:, 0:1])
    assert rel(y, ref64(x, ec[:, 1], ec[:, 0])) < TOL[torch.bfloat16]


@pytest.mark.parametrize("D", [1, 7, 1000, 1536, 4100])
@pytest.mark.parametrize("offset", [0, 1])
def test_hold_out_widths_strided_rows_misaligned(D, offset):
    """B > 1 with Wan's strided [B, 1, D] rows (the table fast path), aligned and misaligned x:
    y, dx and de against float64."""
    x, e, dy = wan(3, 37, D, offset=offset)
    y, dx, de = fwd_bwd(x, e, dy)
    x64, e64 = x.detach().double().requires_grad_(True), e.detach().double().requires_grad_(True)
    yr = ref64(x64, e64[:, 1], e64[:, 0])
    gx, ge = torch.autograd.grad(yr, (x64, e64), dy.double())
    assert rel(y, yr) < TOL[torch.bfloat16]
    assert rel(dx, gx) < GTOL[torch.bfloat16] and rel(de, ge) < GTOL[torch.float32]
    assert torch.count_nonzero(de[:, 2:]) == 0  # the rows scale and shift do not use


def test_fast_path_bitwise_equals_the_general_path():
    x, e, dy = wan(2, 300, 1536)
    fast = fwd_bwd(x, e, dy)
    with slice_gradients():  # autograd's slice backward: the general path's kernels
        general = fwd_bwd(x, e, dy)
    for a, b in zip(fast, general):
        assert torch.equal(a, b)
    with torch.no_grad():
        assert torch.equal(adaln(x, e[:, 1:2], e[:, 0:1]), fast[0])


def test_plans_reused_with_new_pointers():
    """Same signature, other tensors: each call's packed pointers are its own."""
    outs = []
    for _ in range(3):
        x, e, dy = wan(2, 129, 1536)
        outs.append((x, e, *fwd_bwd(x, e, dy)))
    for x, e, y, _dx, _de in outs:
        assert rel(y, ref64(x.detach(), e[:, 1].detach(), e[:, 0].detach())) < TOL[y.dtype]


def test_nan_propagates_through_the_fast_path():
    x, e, dy = wan(2, 16, 1536)
    with torch.no_grad():
        x[0, 3, 5] = float("nan")
        y = adaln(x, e[:, 1:2], e[:, 0:1])
    assert (
        torch.isnan(y[0, 3]).all() and torch.isfinite(y[0, :3]).all() and torch.isfinite(y[1]).all()
    )


def test_ten_runs_bitwise_deterministic():
    x, e, dy = wan(8, 1560, 1536)
    first = fwd_bwd(x, e, dy)
    for _ in range(9):
        for a, b in zip(first, fwd_bwd(x, e, dy)):
            assert torch.equal(a, b)


def test_torch_compile_fullgraph_matches_eager():
    x, e, dy = wan(2, 77, 1536)
    f = torch.compile(lambda x, e: adaln(x, e[:, 1:2], e[:, 0:1]) * 2, fullgraph=True)
    y = f(x, e)
    got = (y.detach(), *torch.autograd.grad(y, (x, e), dy))
    y2 = adaln(x, e[:, 1:2], e[:, 0:1]) * 2
    want = (y2.detach(), *torch.autograd.grad(y2, (x, e), dy))
    for a, b in zip(got, want):
        assert rel(a, b) < 1e-5


def test_cuda_graph_capture_and_side_stream():
    x, e, _ = wan(2, 300, 1536)
    s, h = e.detach()[:, 1:2], e.detach()[:, 0:1]
    with torch.no_grad():
        want = adaln(x, s, h)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            on_side = adaln(x, s, h)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            captured = adaln(x, s, h)
        g.replay()
    torch.cuda.synchronize()
    assert torch.equal(on_side, want) and torch.equal(captured, want)
