"""CPU tests of the fused AdaLN op's input validation and of its CUDA host path, run on CPU
tensors with the driver stubbed (lab.ops.host_bench.stub_launches): what each launch would be
given (kernel, grid, argument slots), that plans are reused and rewritten per call, and that
every bad input raises before any launch."""

from __future__ import annotations

import struct

import pytest
import torch

from lab.ops import host_bench
from suite.ops import adaln, layer_norm_affine
from suite.ops.fused_adaln import cuda as fused_cuda
from suite.ops.fused_adaln.kernel_config import MODE_SAMPLE, KernelConfig

B, N, D = 2, 6, 1536


def _wan(grad=False, dtype=torch.bfloat16):
    x = torch.randn(B, N, D, dtype=dtype, requires_grad=grad)
    e = torch.randn(B, 6, D, requires_grad=grad)
    return x, e, e[:, 1:2], e[:, 0:1]


@pytest.fixture
def stub():
    with host_bench.stub_launches() as fake:
        yield fake


# ------------------------------------------------------------------------- device mismatches
@pytest.mark.parametrize("which", ["scale", "shift"])
def test_modulation_on_another_device_raises_naming_both(which):
    x = torch.empty(B, N, D, device="meta")  # x off the CPU: the reference path's checks
    s, h = torch.randn(B, D), torch.randn(B, D)
    s, h = (s, h.to("meta")) if which == "scale" else (s.to("meta"), h)
    with pytest.raises(ValueError, match=rf"{which} is on cpu but x is on meta"):
        adaln(x, s, h)


def test_cpu_modulation_with_device_x_raises_before_any_launch(stub):
    """The CUDA path (stubbed): a host-pointer modulation is refused before a kernel sees it."""
    x = torch.randn(B, N, D, dtype=torch.bfloat16)
    e = torch.randn(B, 6, D, device="meta")
    with pytest.raises(ValueError, match=r"scale is on meta but x is on cpu"):
        adaln(x, e[:, 1:2], e[:, 0:1])
    assert stub.launches == 0
    adaln(x, torch.randn(B, D), torch.randn(B, D))  # the same call with good tensors launches
    assert stub.launches == 1
    with pytest.raises(ValueError, match=r"shift is on meta"):  # a cached signature still checks
        adaln(x, torch.randn(B, D), torch.randn(B, D, device="meta"))
    assert stub.launches == 1


def test_affine_weight_on_another_device():
    x = torch.randn(B, N, 64)
    with pytest.raises(ValueError, match=r"bias is on meta but x is on cpu"):
        layer_norm_affine(x, torch.ones(64), torch.zeros(64, device="meta"))


@pytest.mark.parametrize(
    "call,err,match",
    [
        (lambda x, s, h: adaln(x, s, h, eps=-1.0), ValueError, "eps must be a finite number"),
        (lambda x, s, h: adaln(x, s, h, eps=float("nan")), ValueError, "eps must be"),
        (lambda x, s, h: adaln(x.tolist(), s, h), TypeError, "x must be a torch.Tensor"),
        (lambda x, s, h: adaln(x, s.tolist(), h), TypeError, "scale must be a torch.Tensor"),
        (lambda x, s, h: adaln(x, s.int(), h.int()), TypeError, "scale must be float32"),
        (lambda x, s, h: adaln(x, s, h, out_dtype=torch.int8), TypeError, "out_dtype must be"),
        (lambda x, s, h: adaln(x, s[..., :5], h), ValueError, r"got \[2, 1, 5\]"),
        (lambda x, s, h: adaln(x, torch.ones(3, D), h), ValueError, r"with B=2, N=6, D=1536"),
    ],
)
def test_bad_arguments(call, err, match):
    x, _, s, h = _wan()
    with pytest.raises(err, match=match):
        call(x, s, h)


def test_bad_arguments_raise_on_the_cuda_path_too(stub):
    x, _, s, h = _wan()
    with pytest.raises(ValueError, match="fused AdaLN supports 1 <= D <= 8192"):
        adaln(torch.randn(1, 2, 8200), torch.randn(1, 8200), torch.randn(1, 8200))
    with pytest.raises(TypeError, match="x must be float32"):
        adaln(x.double(), s, h)
    with pytest.raises(ValueError, match="same shape and dtype"):
        adaln(x, s, h.squeeze(1)[:, None, :].expand(B, N, D))
    assert stub.launches == 0


# ------------------------------------------------------------------------- the launch itself
def _fwd_args(fake):
    f, grid, block, params = fake.log[-1]
    return f, grid, block, host_bench.kernel_args(params, 13)


def test_forward_launch_arguments_and_plan_reuse(stub):
    x, e, s, h = _wan()
    y = adaln(x, s, h)
    cfg = KernelConfig("bf16", "float", "bf16", D, MODE_SAMPLE)
    f, grid, block, a = _fwd_args(stub)
    assert f == host_bench.function_id(cfg.fwd_launch(True, B * N).fwd(True))
    assert block == cfg.fwd_threads and grid[0] >= 1
    assert a[0] == x.data_ptr() and a[3] == s.data_ptr() and a[4] == h.data_ptr()
    assert a[1:3] == [N * D, D] and a[5:7] == [6 * D, 0]  # x strides; e's row stride, per sample
    assert a[7] == y.data_ptr() and a[10:12] == [B * N, N]
    assert a[8] == a[9] == 0  # no grad: no backward follows, so no statistics (null pointers)
    assert struct.unpack("<f", struct.pack("<I", a[12] & 0xFFFFFFFF))[0] == pytest.approx(1e-6)
    plans = len(fused_cuda._fwd_plans)
    x2, _, s2, h2 = _wan()
    y2 = adaln(x2, s2, h2)  # same signature: the plan is reused, its pointer slots rewritten
    assert len(fused_cuda._fwd_plans) == plans
    a2 = _fwd_args(stub)[3]
    assert (a2[0], a2[3], a2[7]) == (x2.data_ptr(), s2.data_ptr(), y2.data_ptr())


def test_no_grad_call_reuses_the_plan_its_spec_carries(stub, monkeypatch):
    """After the first no-grad call of a signature, a call looks up one key (the spec, which
    carries the forward's launch plan), not a second one in the plan cache."""
    x, e, s, h = _wan()
    adaln(x, s, h)
    lookups = []
    real = fused_cuda.forward_plan
    monkeypatch.setattr(
        fused_cuda, "forward_plan", lambda *a: lookups.append(a[0].shape) or real(*a)
    )
    x2, _, s2, h2 = _wan()
    y2 = adaln(x2, s2, h2)
    assert lookups == []
    a = _fwd_args(stub)[3]
    assert (a[0], a[3], a[4], a[7]) == (x2.data_ptr(), s2.data_ptr(), h2.data_ptr(), y2.data_ptr())


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("layout", ["contiguous", "permuted", "fp32-out"])
def test_y_is_contiguous_in_its_dtype_whatever_x(stub, layout, grad):
    """y is allocated like x only where that is y's layout (x contiguous, of y's dtype): a dense
    but permuted x (strides (D, B*D, 1)) must still give a contiguous y, which the kernel writes."""
    x = torch.randn(N, B, D, dtype=torch.bfloat16).transpose(0, 1) if layout == "permuted" else (
        torch.randn(B, N, D, dtype=torch.bfloat16))  # fmt: skip
    x.requires_grad_(grad)
    e = torch.randn(B, 6, D)
    out = torch.float32 if layout == "fp32-out" else None
    for _ in range(2):  # first call and cached plan
        y = adaln(x, e[:, 1:2], e[:, 0:1], out_dtype=out)
        assert y.shape == x.shape and y.is_contiguous()
        assert y.dtype == (out or x.dtype)
        assert _fwd_args(stub)[3][7] == y.data_ptr()


@pytest.mark.parametrize("B0,N0", [(0, 6), (2, 0)])
def test_empty_no_grad_inputs_launch_nothing(stub, B0, N0):
    x = torch.randn(B0, N0, D, dtype=torch.bfloat16)
    e = torch.randn(B0, 6, D)
    for _ in range(2):  # the first call makes the spec, the second one reads it
        assert adaln(x, e[:, 1:2], e[:, 0:1]).shape == x.shape
    assert stub.launches == 0


def test_misaligned_x_takes_the_scalar_kernel(stub):
    x = torch.randn(B * N * D + 1, dtype=torch.bfloat16)[1:].view(B, N, D)  # 2 bytes off
    e = torch.randn(B, 6, D)
    adaln(x, e[:, 1:2], e[:, 0:1])
    cfg = KernelConfig("bf16", "float", "bf16", D, MODE_SAMPLE)
    assert stub.log[-1][0] == host_bench.function_id(cfg.fwd(False))


def test_backward_writes_the_table_rows(stub):
    x, e, s, h = _wan(grad=True)
    y = adaln(x, s, h)
    stub.log.clear()
    dx, de = torch.autograd.grad(y, (x, e), torch.randn_like(y))
    assert de.shape == e.shape and de.dtype == torch.float32 and dx.shape == x.shape
    (row_f, _, _, row_p), (fin_f, _, fin_block, fin_p) = stub.log
    cfg = KernelConfig("bf16", "float", "bf16", D, MODE_SAMPLE)
    assert row_f == host_bench.function_id(cfg.bwd(True, True))
    assert fin_f == host_bench.function_id(cfg.finalize(cfg.bwd_rt, cfg.vec))
    r = host_bench.kernel_args(row_p, 16)
    assert r[0] == x.data_ptr() and r[4] == s.data_ptr() and r[9] == dx.data_ptr()
    fa = host_bench.kernel_args(fin_p, 8)
    # the finalize writes scale's row (1) and shift's row (0) of de, zeroes rows 2..5
    assert fa[2] == de.data_ptr() + 4 * D and fa[3] == de.data_ptr() and fa[5] == de.data_ptr()
    assert fa[4] == 6 * D and fa[6] == 0b111100


def test_no_grad_and_grad_calls_take_their_paths(stub):
    x, e, s, h = _wan(grad=True)
    with torch.no_grad():
        assert adaln(x, s, h).grad_fn is None
    assert type(adaln(x, s, h).grad_fn).__name__ == "_EagerAdaLNRowsBackward"
    assert stub.launches == 2


@pytest.mark.parametrize("B0,N0", [(0, 6), (2, 0)])
def test_empty_inputs_launch_nothing(stub, B0, N0):
    x = torch.randn(B0, N0, D, dtype=torch.bfloat16, requires_grad=True)
    e = torch.randn(B0, 6, D, requires_grad=True)
    y = adaln(x, e[:, 1:2], e[:, 0:1])
    dx, de = torch.autograd.grad(y, (x, e), torch.ones_like(y))
    assert y.shape == x.shape and dx.shape == x.shape and de.shape == e.shape
    assert stub.launches == 0 and not de.any()


@pytest.mark.parametrize(
    "case,launches",
    [("token", 2), ("sample-separate", 3), ("affine", 3), ("dtile-rows", 4), ("broadcast", 3)],
)
def test_every_backward_layout_launches_its_kernels(stub, case, launches):
    """The general path's layouts through the stubbed launches: the right number of launches
    (forward, row kernel, D-tile pass, finalize) and gradients shaped like their inputs."""
    x = torch.randn(B, N, D, dtype=torch.bfloat16, requires_grad=True)
    if case == "token":
        s, h = torch.randn(B, N, D, requires_grad=True), torch.randn(B, N, D, requires_grad=True)
    elif case == "broadcast":
        s, h = torch.randn(1, D, requires_grad=True), torch.randn(1, D, requires_grad=True)
    else:
        s, h = torch.randn(B, 1, D, requires_grad=True), torch.randn(B, 1, D, requires_grad=True)
    if case == "affine":
        w, b = torch.ones(D, requires_grad=True), torch.zeros(D, requires_grad=True)
        y, ins = layer_norm_affine(x, w, b), (x, w, b)
    elif case == "dtile-rows":
        e = torch.randn(B, 6, D, requires_grad=True)
        y, ins = adaln(x, e[:, 1:2], e[:, 0:1], backward="dtile"), (x, e)
    else:
        y, ins = adaln(x, s, h), (x, s, h)
    grads = torch.autograd.grad(y, ins, torch.ones_like(y))
    assert [g.shape for g in grads] == [t.shape for t in ins]
    assert stub.launches == launches


def test_functorch_transforms_take_the_stock_apply(stub):
    """The eager path skips Function.apply's Python layer only outside functorch transforms:
    inside one the stock apply runs and says why the op is not transformable."""
    x = torch.randn(B, N, D, dtype=torch.bfloat16)
    e = torch.randn(B, 6, D)

    def loss(e):
        return adaln(x, e[:, 1:2], e[:, 0:1]).float().sum()

    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.grad(loss)(e)
    assert stub.launches == 0
