"""GPU tests: fwd+bwd of the fused AdaLN op (Wan's table rows, autograd.grad of x and the table)
captured in one CUDA graph and replayed on new inputs gives eager's gradients, bitwise (the
kernels are deterministic), including at the burst benchmark's 8 x 1560 x 1536 where the
capture once failed (lab/tests/test_graph_check_gpu.py runs lab/ops/graph_check.py's
measurement cases, each in a fresh process)."""

from __future__ import annotations

import pytest
import torch

from suite.ops import adaln

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _static(B, N, D):
    x = torch.randn(B, N, D, device="cuda", dtype=torch.bfloat16).requires_grad_(True)
    e = torch.randn(B, 6, D, device="cuda").requires_grad_(True)
    dy = torch.randn(B, N, D, device="cuda", dtype=torch.bfloat16)
    return x, e, dy


def _step(x, e, dy):
    y = adaln(x, e[:, 1:2], e[:, 0:1])
    return (y, *torch.autograd.grad(y, (x, e), dy))


@pytest.mark.parametrize("shape", [(2, 300, 1536), (8, 1560, 1536), (1, 4096, 1536)])
def test_fwd_bwd_capture_replays_eager_gradients(shape):
    x, e, dy = _static(*shape)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            _step(x, e, dy)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = _step(x, e, dy)
    for _ in range(2):  # new values in the captured inputs: the replay reads them
        nx, ne, ndy = _static(*shape)
        with torch.no_grad():
            x.copy_(nx), e.copy_(ne), dy.copy_(ndy)
        g.replay()
        torch.cuda.synchronize()
        want = _step(x, e, dy)
        for got, ref in zip(static_out, want):
            assert torch.equal(got, ref.detach())
        assert torch.count_nonzero(static_out[2][:, 2:]) == 0  # rows scale and shift do not use


def test_first_backward_of_a_shape_inside_the_capture():
    """Only the no-grad forward of this shape ran before: the backward's plan (functions,
    occupancy, shared-memory attributes) is built by the forward inside the capture and the
    backward's first launches are captured. Last in this file: a failed capture breaks the
    process's CUDA state."""
    x, e, dy = _static(2, 77, 1536)
    with torch.no_grad():
        adaln(x, e[:, 1:2], e[:, 0:1])
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = _step(x, e, dy)
    g.replay()
    torch.cuda.synchronize()
    for got, ref in zip(static_out, _step(x, e, dy)):
        assert torch.equal(got, ref.detach())
