"""Tests of the fused AdaLN op, on each device where a test means the same on both: the CPU's
eager fallback and the CUDA kernels against float64, the API's errors, torch.compile, NaN/inf.
CUDA only: the kernels' widths, precision and memory paths, determinism, FSDP2 on NCCL, and the
thin host path (launch plans, the validation cache, the fast paths, graphs, side streams).
CPU only: the eager path's dispatch and FSDP2 on gloo. The kernels' NVRTC builds and launch
rules: tests/test_adaln_kernels_cpu.py; the benchmark harness: tests/test_adaln_bench_cpu.py.

Every GPU check draws fresh random inputs (never zeros) and poisons the allocator with NaN before
the op runs, so an output element the kernel forgot to write shows up as NaN.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from suite.ops import AdaLN, FusedLayerNorm, adaln, layer_norm_affine
from suite.ops.fused_adaln.args import slice_gradients
from tests.layouts import DEVICES, gpu_only

TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}  # relative L2 (METHOD.md)
GTOL = {torch.float32: 1e-4, torch.bfloat16: 1e-2, torch.float16: 2e-3}
_seed = [1000]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def ref64(x, scale, shift, eps=1e-6, affine=False):
    """Independent float64 reference: F.layer_norm in float64, modulation broadcast by shape."""
    y = F.layer_norm(x.double(), (x.shape[-1],), eps=eps)
    s, h = scale.double(), shift.double()
    if affine:
        return y * s + h
    if s.dim() == 3 and s.shape[1] == 1 or s.dim() == 2:
        s, h = s.reshape(s.shape[0], 1, -1), h.reshape(h.shape[0], 1, -1)
    return y * (1 + s) + h


def make(B, N, D, dtype, mod_dtype, per_token=False, seed=0, device="cpu"):
    """x, scale, shift drawn on the host (the same numbers on every device), then moved."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(B, N, D, generator=g) * 2 + 0.5).to(device, dtype)
    shape = (B, N, D) if per_token else (B, D)
    scale = (torch.randn(shape, generator=g) * 0.5).to(device, mod_dtype)
    shift = torch.randn(shape, generator=g).to(device, mod_dtype)
    return x, scale, shift


def randn(*shape, device, dtype=torch.float32, requires_grad=False):
    """A leaf tensor drawn on the host from the global generator, then moved to `device`."""
    return torch.randn(*shape).to(device, dtype).requires_grad_(requires_grad)


# ----------------------------------------------------------------------------- both devices
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("per_token", [False, True])
@pytest.mark.parametrize("B,N,D", [(1, 1, 64), (2, 33, 1000), (3, 7, 1536), (1, 5, 4100)])
def test_forward_backward_vs_float64(dtype, per_token, B, N, D, device):
    x, scale, shift = make(B, N, D, dtype, torch.float32, per_token, seed=B * N + D, device=device)
    for t in (x, scale, shift):
        t.requires_grad_(True)
    for out_dtype in (None, torch.float32):
        y = adaln(x, scale, shift, out_dtype=out_dtype)
        assert y.dtype == (out_dtype or dtype) and y.shape == x.shape
        yr = ref64(x, scale, shift)
        assert rel(y, yr) < TOL[y.dtype]
        dy = torch.randn(y.shape, dtype=torch.float64).to(device, y.dtype)
        got = torch.autograd.grad(y, (x, scale, shift), dy)
        want = torch.autograd.grad(yr, (x, scale, shift), dy.double())
        for gg, ww in zip(got, want):
            assert gg.shape == ww.shape and gg.dtype in (dtype, torch.float32)
            assert rel(gg, ww) < max(TOL[dtype], 1e-4), (gg.dtype, rel(gg, ww))


@pytest.mark.parametrize("device", DEVICES)
def test_wan_strided_views_of_b6d(device):
    """Wan passes e[:, k:k+1, :] chunks of an fp32 [B, 6, D] tensor: no copy, right grads."""
    B, N, D = 2, 9, 256
    x = randn(B, N, D, device=device, dtype=torch.bfloat16, requires_grad=True)
    e = randn(B, 6, D, device=device, requires_grad=True)
    shift, scale = e[:, 0:1], e[:, 1:2]
    y = adaln(x, scale, shift, out_dtype=torch.float32)
    yr = ref64(x, scale, shift)
    assert rel(y, yr) < 1e-2
    dy = torch.randn_like(y)
    (ge,) = torch.autograd.grad(y, e, dy)
    (gr,) = torch.autograd.grad(yr, e, dy.double())
    assert rel(ge, gr) < 1e-4 and ge[:, 2:].abs().sum() == 0


def _grad_fns(t: torch.Tensor) -> set[str]:
    """Names of every autograd node between t and the leaves."""
    seen, todo = set(), [t.grad_fn]
    while todo:
        f = todo.pop()
        if f is not None and type(f).__name__ not in seen:
            seen.add(type(f).__name__)
            todo += [g for g, _ in f.next_functions]
    return seen


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("table_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", ["slices", "chunk", "select"])
def test_rows_of_one_modulation_table_write_its_gradient_whole(table_dtype, rows, device):
    """scale and shift as rows of one [B, 6, D] tensor: the op's backward returns that tensor's
    gradient (no slice backward in the graph), equal to the float64 reference, summed with the
    gradient of another use of the table (Wan's gate), for Wan's three ways of taking rows."""
    B, N, D = 2, 7, 192
    x = randn(B, N, D, device=device, dtype=torch.bfloat16, requires_grad=True)
    m = randn(1, 6, D, device=device, requires_grad=True)
    t = randn(B, 6, D, device=device, requires_grad=True)
    e = (m + t).to(table_dtype)  # not a leaf, as in Wan: modulation + time embedding
    if rows == "slices":
        shift, scale, gate = e[:, 3:4], e[:, 4:5], e[:, 5:6]
    elif rows == "chunk":
        shift, scale, gate = e.chunk(6, dim=1)[3:6]
    else:
        shift, scale, gate = e[:, 3], e[:, 4], e[:, 5]
    y = adaln(x, scale, shift, out_dtype=torch.float32)
    names = _grad_fns(y)
    assert "_EagerAdaLNRowsBackward" in names and not names & {"SliceBackward0", "SelectBackward0"}
    loss_w = randn(B, N, D, device=device)
    g = gate.reshape(B, 1, D)
    got = torch.autograd.grad(((y * loss_w).sum() + (g.float() * 3).sum()), (x, m, t))
    yr = ref64(x, scale, shift)
    want = torch.autograd.grad(((yr * loss_w).sum() + (g.double() * 3).sum()), (x, m, t))
    tol = 1e-4 if table_dtype == torch.float32 else 1e-2
    # dx is bf16 on both sides: an element whose fp64 value sits at a rounding boundary differs
    # by one bf16 ulp (rel up to ~3.4e-4 seen in 1 of 300 seeds), so dx gets bf16's tolerance
    for gg, ww, t in zip(got, want, (max(tol, 2e-3), tol, tol)):
        assert gg.shape == ww.shape and rel(gg, ww) < t


@pytest.mark.parametrize("device", DEVICES)
def test_rows_of_one_table_fall_back_where_they_must(device):
    """The same row twice, a broadcast [1, D] row, no grad wanted: the slice path, right answers."""
    B, N, D = 2, 5, 128
    x = randn(B, N, D, device=device, requires_grad=True)
    e = randn(B, 6, D, device=device, requires_grad=True)
    y = adaln(x, e[:, 1:2], e[:, 1:2])  # scale = shift: the gradients add
    assert "_EagerAdaLNRowsBackward" not in _grad_fns(y)
    dy = torch.randn_like(y)
    (ge,) = torch.autograd.grad(y, e, dy)
    (gr,) = torch.autograd.grad(ref64(x, e[:, 1:2], e[:, 1:2]), e, dy.double())
    assert rel(ge, gr) < 1e-4
    e1 = randn(1, 6, D, device=device, requires_grad=True)
    y = adaln(x, e1[:, 1:2], e1[:, 0:1])  # one row for every sample: stride 0, not the table's
    assert "_EagerAdaLNRowsBackward" not in _grad_fns(y)
    (ge,) = torch.autograd.grad(y, e1, dy)
    (gr,) = torch.autograd.grad(ref64(x, e1[:, 1:2], e1[:, 0:1]), e1, dy.double())
    assert rel(ge, gr) < 1e-4
    with torch.no_grad():
        y = adaln(x, e[:, 1:2], e[:, 0:1])
    assert y.grad_fn is None and rel(y, ref64(x, e[:, 1:2], e[:, 0:1])) < 1e-5


@pytest.mark.parametrize("device", DEVICES)
def test_noncontiguous_x_and_b_gt_1_uses_each_samples_modulation(device):
    B, N, D = 3, 10, 128
    base = randn(N, B, D, device=device)
    x = base.transpose(0, 1)  # [B, N, D], not contiguous
    scale, shift = randn(B, D, device=device), randn(B, D, device=device)
    y = adaln(x, scale, shift)
    assert rel(y, ref64(x, scale, shift)) < 1e-5
    y1 = adaln(x[1:2], scale[1:2], shift[1:2])
    torch.testing.assert_close(y[1:2], y1)


@pytest.mark.parametrize("device", DEVICES)
def test_affine_layer_norm_and_modules(device):
    B, N, D = 2, 6, 320
    x = randn(B, N, D, device=device, requires_grad=True)
    w, b = randn(D, device=device, requires_grad=True), randn(D, device=device, requires_grad=True)
    y = layer_norm_affine(x, w, b)
    yr = ref64(x, w, b, affine=True)
    assert rel(y, yr) < 1e-5
    dy = torch.randn_like(y)
    for gg, ww in zip(
        torch.autograd.grad(y, (x, w, b), dy), torch.autograd.grad(yr, (x, w, b), dy.double())
    ):
        assert rel(gg, ww) < 1e-4
    m = FusedLayerNorm(D).to(device)
    assert rel(m(x), F.layer_norm(x.double(), (D,), eps=1e-6)) < 1e-5
    mod = AdaLN(D, out_dtype=torch.float32, backward="dtile")
    zeros = torch.zeros(B, D, device=device)
    assert mod(x.bfloat16(), zeros, zeros).dtype == torch.float32


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("D", [64, 1536])
def test_nan_inf_propagate_like_reference(D, device):
    x, scale, shift = make(2, 8, D, torch.float32, torch.float32, device=device)
    x[0, 1, 3] = float("nan")
    x[1, 2, 5] = float("inf")
    y = adaln(x, scale, shift)
    yr = ref64(x, scale, shift)
    assert torch.equal(torch.isnan(y), torch.isnan(yr))
    assert torch.isfinite(y[0, 0]).all() and torch.isnan(y[0, 1]).all()
    ok = ~torch.isnan(yr)
    assert rel(y[ok], yr[ok]) < 1e-5


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "bad,match",
    [
        (lambda x, s, h: adaln(x[0], s, h), r"x must be \[B, N, D\]"),
        (lambda x, s, h: adaln(x.double(), s, h), "x must be float32"),
        (lambda x, s, h: adaln(x, s[:, :5], h), r"scale must be \[B, D\]"),
        (lambda x, s, h: adaln(x, s, h.half()), "same shape and dtype"),
        (lambda x, s, h: adaln(x, s, h, backward="atomic"), "backward must be one of"),
        (lambda x, s, h: layer_norm_affine(x, s, h), "weight and bias must both be"),
    ],
)
def test_clear_errors(bad, match, device):
    x, s, h = make(2, 3, 16, torch.float32, torch.float32, device=device)
    with pytest.raises((ValueError, TypeError), match=match):
        bad(x, s, h)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    x, s, h = make(2, 5, 64, torch.float32, torch.float32, device=device)
    x.requires_grad_(True)
    f = torch.compile(lambda x, s, h: adaln(x, s, h) * 2, fullgraph=True)
    y = f(x, s, h)
    torch.testing.assert_close(y, adaln(x, s, h) * 2)
    y.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


# ----------------------------------------------------------------------------- CPU only
def test_eager_calls_skip_the_custom_op_and_compile_traces_it(monkeypatch):
    """Eager calls take the autograd.Function (the custom-op dispatch cost ~50 us per call on the
    H200 host) with the same results and gradients as the custom op; torch.compile calls the op."""
    from suite.ops.fused_adaln import op as mod

    x, s, h = make(2, 5, 64, torch.float32, torch.float32)

    def fresh():
        return [t.detach().clone().requires_grad_(True) for t in (x, s, h)]

    leaves = fresh()
    y_op = torch.ops.adaln.forward(*leaves, 1e-6, mod.MODE_SAMPLE, torch.float32, "fused")[0]
    g_op = torch.autograd.grad(y_op.square().sum(), leaves)

    def forbidden(*args):
        raise AssertionError("an eager call went through the custom op")

    monkeypatch.setattr(mod, "adaln_forward", forbidden)
    leaves = fresh()
    y = mod.adaln(*leaves)
    assert torch.equal(y, y_op)
    for g, w in zip(torch.autograd.grad(y.square().sum(), leaves), g_op):
        assert torch.equal(g, w)

    seen = []
    monkeypatch.setattr(
        mod, "adaln_forward", lambda *a: seen.append(a) or torch.ops.adaln.forward(*a)
    )
    torch._dynamo.reset()
    torch.compile(mod.adaln, fullgraph=True)(x, s, h)
    assert seen  # traced through the custom op


def test_inside_fsdp2_module_single_process():
    """The op inside an FSDP2 (fully_shard) module: forward and backward match the plain module."""
    import torch.distributed as dist

    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:
        pytest.skip("torch.distributed.fsdp.fully_shard unavailable")
    if not dist.is_available() or dist.is_initialized():
        pytest.skip("torch.distributed unavailable or already initialized")
    from fsdp_block import one_process_group, plain_and_sharded

    with one_process_group("gloo"):
        plain, sharded = plain_and_sharded(64, "cpu")
        x, e = torch.randn(2, 10, 64), torch.randn(2, 6, 64)
        y1, y2 = plain(x, e), sharded(x, e)
        torch.testing.assert_close(y2, y1)
        y1.square().sum().backward()
        y2.square().sum().backward()
        torch.testing.assert_close(sharded.mod.grad.full_tensor(), plain.mod.grad)


# ----------------------------------------------------------------------------- CUDA only: kernels
def poison(*tensors_like_bytes: int) -> None:
    """Fill freed allocator blocks with 0xFF (NaN in bf16, fp16 and fp32) so outputs the op
    allocates next start as NaN, not as stale valid numbers."""
    bufs = [
        torch.full((n + 512,), 255, dtype=torch.uint8, device="cuda") for n in tensors_like_bytes
    ]
    del bufs


def rand(*shape, dtype=torch.float32, scale=1.0, offset=0.0):
    _seed[0] += 1
    g = torch.Generator(device="cuda").manual_seed(_seed[0])
    return (torch.randn(*shape, generator=g, device="cuda") * scale + offset).to(dtype)


def check(x, scale, shift, out_dtype=None, backward="fused", affine=False, grads=True):
    """Forward and all gradients of the fused op against float64 autograd of the reference."""
    x, scale, shift = (t.detach().requires_grad_(grads) for t in (x, scale, shift))
    nbytes = x.numel() * 4
    poison(nbytes, nbytes)
    if affine:
        y = layer_norm_affine(x, scale, shift, out_dtype=out_dtype, backward=backward)
    else:
        y = adaln(x, scale, shift, out_dtype=out_dtype, backward=backward)
    yr = ref64(x, scale, shift, affine=affine)
    assert torch.isfinite(y).all(), "unwritten (poisoned) or non-finite output"
    assert rel(y, yr) < TOL[y.dtype], (y.dtype, rel(y, yr))
    if not grads:
        return
    dy = rand(*y.shape, dtype=y.dtype)
    poison(nbytes, nbytes, nbytes)
    got = torch.autograd.grad(y, (x, scale, shift), dy)
    want = torch.autograd.grad(yr, (x, scale, shift), dy.double())
    for name, g, w in zip(("dx", "dscale", "dshift"), got, want):
        assert g.shape == w.shape and torch.isfinite(g).all(), name
        tol = max(GTOL[g.dtype], GTOL[x.dtype] if name == "dx" else 0)
        assert rel(g, w) < tol, (name, g.dtype, rel(g, w))


DS = [64, 1000, 1536, 3072, 4100, 5120, 8192]


@gpu_only
@pytest.mark.parametrize("D", DS)
@pytest.mark.parametrize(
    "dtype,mod,out",
    [
        (torch.bfloat16, torch.float32, None),
        (torch.float32, torch.float32, None),
        (torch.bfloat16, torch.float32, torch.float32),
    ],
)
def test_per_sample_widths(D, dtype, mod, out):
    B, N = 2, 37  # odd N: no tile divides it
    x = rand(B, N, D, dtype=dtype, scale=2.0, offset=0.5)
    check(x, rand(B, D, dtype=mod, scale=0.5), rand(B, D, dtype=mod), out_dtype=out)
    check(
        x, rand(B, D, dtype=mod, scale=0.5), rand(B, D, dtype=mod), out_dtype=out, backward="dtile"
    )


@gpu_only
@pytest.mark.parametrize("D", [64, 1000, 1536, 5120])
def test_rows_with_a_large_mean_keep_fp32_precision(D):
    """Mean 300, spread 1: E[x^2] - mean^2 in fp32 would be off by ~3e-3 relative; the two-pass
    statistics stay near fp32 resolution at that offset (ulp(300) / 1 ~ 3e-5: torch's own fp32
    layer_norm is no closer)."""
    x = rand(2, 33, D, scale=1.0, offset=300.0)
    sc, sh = rand(2, D, scale=0.5), rand(2, D)
    y = adaln(x, sc, sh)
    assert rel(y, ref64(x, sc, sh)) < 1e-4
    assert rel(F.layer_norm(x, (D,), eps=1e-6), F.layer_norm(x.double(), (D,), eps=1e-6)) < 1e-4


@gpu_only
@pytest.mark.parametrize("D", [1000, 1536, 3072])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_per_token_and_affine(D, dtype):
    B, N = 2, 21
    x = rand(B, N, D, dtype=dtype)
    check(x, rand(B, N, D, dtype=dtype, scale=0.5), rand(B, N, D, dtype=dtype))
    check(x, rand(D, scale=0.5, offset=1.0), rand(D), affine=True)
    check(x, rand(D, scale=0.5, offset=1.0), rand(D), affine=True, backward="dtile")


@gpu_only
@pytest.mark.parametrize("N", [1, 3, 4096])
@pytest.mark.parametrize("B", [1, 3])
def test_sequence_lengths_and_batch(N, B):
    D = 1536
    check(rand(B, N, D, dtype=torch.bfloat16), rand(B, D, scale=0.5), rand(B, D))


@gpu_only
def test_n_75600_wan_720p():
    B, N, D = 1, 75600, 5120
    check(
        rand(B, N, D, dtype=torch.bfloat16),
        rand(B, D, scale=0.5),
        rand(B, D),
        out_dtype=torch.float32,
    )


@gpu_only
def test_noncontiguous_x_and_wan_strided_modulation():
    B, N, D = 3, 50, 1536
    x = rand(N, B, D, dtype=torch.bfloat16).transpose(0, 1)  # [B, N, D] with row stride B*D
    e = rand(B, 6, D)
    check(x, e[:, 1:2], e[:, 0:1], out_dtype=torch.float32)
    e.requires_grad_(True)
    y = adaln(x, e[:, 1:2], e[:, 0:1], out_dtype=torch.float32)
    (ge,) = torch.autograd.grad(y, e, torch.ones_like(y))
    assert ge[:, 2:].abs().sum() == 0 and ge[:, :2].abs().sum() > 0


@gpu_only
@pytest.mark.parametrize("backward", ["fused", "dtile"])
@pytest.mark.parametrize("D", [1000, 1536, 3072])
def test_modulation_table_rows_match_separate_tensors(D, backward):
    """scale and shift as rows of Wan's [B, 6, D] e: the finalize writes e's gradient rows
    directly and zeroes the others (2 kernels per backward, not 7 with the slice backward),
    bitwise equal to the same op on separate [B, D] tensors."""
    from suite.experiments.opmemory import kernels_per_call

    B, N = 2, 1000
    x = rand(B, N, D, dtype=torch.bfloat16, scale=2.0).requires_grad_(True)
    e = rand(B, 6, D, scale=0.5).requires_grad_(True)
    sc, sh = (e[:, k].detach().clone().requires_grad_(True) for k in (4, 3))
    dy = rand(B, N, D, dtype=torch.float32)
    poison(x.numel() * 4, x.numel() * 4)
    y = adaln(x, e[:, 4:5], e[:, 3:4], out_dtype=torch.float32, backward=backward)
    poison(x.numel() * 2, 2**20, e.numel() * 4)  # dx, the partial rows, e's gradient: NaN
    gx, ge = torch.autograd.grad(y, (x, e), dy, retain_graph=True)
    ys = adaln(x, sc, sh, out_dtype=torch.float32, backward=backward)
    gxs, gsc, gsh = torch.autograd.grad(ys, (x, sc, sh), dy)
    assert torch.equal(y, ys) and torch.equal(gx, gxs)
    assert torch.equal(ge[:, 4], gsc) and torch.equal(ge[:, 3], gsh)
    assert not ge[:, [0, 1, 2, 5]].any() and torch.isfinite(ge).all()
    yr = ref64(x, e[:, 4], e[:, 3])
    (ger,) = torch.autograd.grad(yr, e, dy.double())
    assert rel(ge, ger) < GTOL[torch.float32]
    n = kernels_per_call(lambda: torch.autograd.grad(y, (x, e), dy, retain_graph=True))
    assert n == (2 if backward == "fused" else 3), n


@gpu_only
@pytest.mark.parametrize("D", [1536, 1000])
def test_misaligned_pointers_fall_back(D):
    B, N = 2, 19
    xb = rand(B * N * D + 1, dtype=torch.bfloat16)
    x = xb[1:].view(B, N, D)  # 2-byte offset: not 16-byte aligned
    mb = rand(2 * B * D + 1)
    check(x, mb[1 : 1 + B * D].view(B, D), mb[1 + B * D :].view(B, D))


@gpu_only
def test_more_than_2_31_elements():
    B, N, D = 1, 262_200, 8192  # 2.15e9 elements: offsets need 64 bits
    torch.cuda.empty_cache()  # earlier tests' cached blocks are not in use: do not skip for them
    free, _ = torch.cuda.mem_get_info()
    if free < 24 * 2**30:
        pytest.skip(f"needs ~24 GiB free GPU memory, {free / 2**30:.1f} GiB free")
    x = rand(B, N, D, dtype=torch.bfloat16)
    s, h = rand(B, D, scale=0.5), rand(B, D)
    x.requires_grad_(True)
    y = adaln(x, s, h)
    tail = slice(N - 64, N)  # rows past element 2^31
    assert rel(y[:, tail], ref64(x[:, tail].detach(), s, h)) < 1e-2
    dy = rand(B, N, D, dtype=torch.bfloat16)
    (dx,) = torch.autograd.grad(y, x, dy)
    xt = x[:, tail].detach().double().requires_grad_(True)
    (dxr,) = torch.autograd.grad(ref64(xt, s, h), xt, dy[:, tail].double())
    assert rel(dx[:, tail], dxr) < 1e-2


@gpu_only
@pytest.mark.parametrize("backward", ["fused", "dtile"])
def test_gradients_bitwise_deterministic(backward):
    B, N, D = 2, 5000, 1536
    x = rand(B, N, D, dtype=torch.bfloat16).requires_grad_(True)
    e = rand(B, 6, D).requires_grad_(True)
    dy = rand(B, N, D)
    runs = []
    for _ in range(10):
        y = adaln(x, e[:, 1:2], e[:, 0:1], out_dtype=torch.float32, backward=backward)
        runs.append(torch.autograd.grad(y, (x, e), dy))
    for gx, ge in runs[1:]:
        assert torch.equal(gx, runs[0][0]) and torch.equal(ge, runs[0][1])


@gpu_only
def test_inside_fsdp2_module_nccl():
    """The op inside an FSDP2 (fully_shard) module on the GPU (NCCL, one process): the fused
    kernels run in its forward and backward (profiler: adaln kernels, no eager fallback), and
    the output and the modulation parameter's gradient match the unsharded module's."""
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    if not dist.is_nccl_available() or dist.is_initialized():
        pytest.skip("NCCL unavailable or torch.distributed already initialized")
    from fsdp_block import one_process_group, plain_and_sharded

    with one_process_group("nccl", device_id=torch.device("cuda", 0)):
        plain, sharded = plain_and_sharded(1536, "cuda")
        x, e = rand(2, 1000, 1536), rand(2, 6, 1536)
        y1 = plain(x, e)
        y1.square().sum().backward()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            y2 = sharded(x, e)
            y2.square().sum().backward()
            torch.cuda.synchronize()
        names = [
            ev.name for ev in prof.events() if ev.device_type == torch.autograd.DeviceType.CUDA
        ]
        assert any("adaln_fwd" in n for n in names), names
        assert any("adaln_bwd<" in n for n in names), names
        assert not any("native_layer_norm" in n or "layer_norm_kernel" in n.lower() for n in names)
        torch.testing.assert_close(y2, y1)
        torch.testing.assert_close(sharded.mod.grad.full_tensor(), plain.mod.grad)


@gpu_only
def test_torch_compile_no_graph_break_and_autocast():
    B, N, D = 2, 300, 1536
    x = rand(B, N, D).requires_grad_(True)
    s, h = rand(B, D), rand(B, D)
    lin = torch.nn.Linear(D, D, device="cuda")

    def block(x, s, h):
        return lin(adaln(x, s, h, out_dtype=torch.float32)).sum()

    f = torch.compile(block, fullgraph=True)  # raises on a graph break
    torch.testing.assert_close(f(x, s, h), block(x, s, h), rtol=1e-4, atol=1e-2)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = f(x, s, h)
        out.backward()
    assert torch.isfinite(x.grad).all()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = adaln(x.bfloat16(), s, h)
    assert y.dtype == torch.bfloat16 and rel(y, ref64(x.bfloat16(), s, h)) < 1e-2


@gpu_only
def test_unsupported_inputs_raise():
    x = rand(1, 4, 10000, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="D <= 8192"):
        adaln(x, rand(1, 10000), rand(1, 10000))
    with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
        adaln(rand(1, 4, 64).double(), rand(1, 64), rand(1, 64))


# ----------------------------------------------------------------------------- CUDA only: host path
def wan(B, N, D, dtype=torch.bfloat16, offset=0):
    """x [B, N, D] (`offset` elements into its storage: misaligned for offset % 8) and Wan's fp32
    [B, 6, D] modulation, both needing gradients."""
    flat = rand(B * N * D + offset, dtype=dtype)
    x = flat[offset:].view(B, N, D).detach().requires_grad_(True)
    return x, rand(B, 6, D).requires_grad_(True), rand(B, N, D, dtype=dtype)


def fwd_bwd(x, e, dy, **kw):
    y = adaln(x, e[:, 1:2], e[:, 0:1], **kw)
    return (y.detach(), *torch.autograd.grad(y, (x, e), dy))


@gpu_only
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


@gpu_only
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


@gpu_only
def test_fast_path_bitwise_equals_the_general_path():
    x, e, dy = wan(2, 300, 1536)
    fast = fwd_bwd(x, e, dy)
    with slice_gradients():  # autograd's slice backward: the general path's kernels
        general = fwd_bwd(x, e, dy)
    for a, b in zip(fast, general):
        assert torch.equal(a, b)
    with torch.no_grad():
        assert torch.equal(adaln(x, e[:, 1:2], e[:, 0:1]), fast[0])


@gpu_only
def test_plans_reused_with_new_pointers():
    """Same signature, other tensors: each call's packed pointers are its own."""
    outs = []
    for _ in range(3):
        x, e, dy = wan(2, 129, 1536)
        outs.append((x, e, *fwd_bwd(x, e, dy)))
    for x, e, y, _dx, _de in outs:
        assert rel(y, ref64(x.detach(), e[:, 1].detach(), e[:, 0].detach())) < TOL[y.dtype]


@gpu_only
def test_nan_propagates_through_the_fast_path():
    x, e, dy = wan(2, 16, 1536)
    with torch.no_grad():
        x[0, 3, 5] = float("nan")
        y = adaln(x, e[:, 1:2], e[:, 0:1])
    assert (
        torch.isnan(y[0, 3]).all() and torch.isfinite(y[0, :3]).all() and torch.isfinite(y[1]).all()
    )


@gpu_only
@pytest.mark.parametrize("n", [1, 2, 77, 1560, 4096])  # odd, pair and prefetched-wave kernels
@pytest.mark.parametrize("d", [1536, 5120])
def test_no_grad_forward_equals_the_training_forward(n, d):
    """Without grad the forward writes no statistics (null pointers): y must be bit for bit the
    y of the forward a backward follows, which does write them."""
    x, e, _ = wan(2, n, d)
    with torch.no_grad():
        inference = adaln(x, e[:, 1:2], e[:, 0:1])
    training = adaln(x, e[:, 1:2], e[:, 0:1])
    assert training.requires_grad and torch.equal(inference, training.detach())


@gpu_only
@pytest.mark.parametrize("layout", ["contiguous", "permuted", "fp32-out"])
def test_no_grad_y_is_contiguous_and_right_whatever_x(layout):
    """The no-grad forward allocates y like x only where that is y's layout: a dense but permuted
    x (strides (D, B*D, 1)) still gets a contiguous y, written where its strides say."""
    B, N, D = 3, 50, 1536
    x = rand(N, B, D, dtype=torch.bfloat16)
    x = x.transpose(0, 1) if layout == "permuted" else x.reshape(B, N, D)
    e = rand(B, 6, D)
    out = torch.float32 if layout == "fp32-out" else None
    for _ in range(2):  # the first call fills the plan, the second uses it
        with torch.no_grad():
            y = adaln(x, e[:, 1:2], e[:, 0:1], out_dtype=out)
        assert y.is_contiguous() and y.dtype == (out or x.dtype)
        assert rel(y, ref64(x, e[:, 1:2], e[:, 0:1])) < TOL[y.dtype]


@gpu_only
def test_ten_runs_bitwise_deterministic():
    x, e, dy = wan(8, 1560, 1536)
    first = fwd_bwd(x, e, dy)
    for _ in range(9):
        for a, b in zip(first, fwd_bwd(x, e, dy)):
            assert torch.equal(a, b)


@gpu_only
def test_torch_compile_fullgraph_matches_eager():
    x, e, dy = wan(2, 77, 1536)
    f = torch.compile(lambda x, e: adaln(x, e[:, 1:2], e[:, 0:1]) * 2, fullgraph=True)
    y = f(x, e)
    got = (y.detach(), *torch.autograd.grad(y, (x, e), dy))
    y2 = adaln(x, e[:, 1:2], e[:, 0:1]) * 2
    want = (y2.detach(), *torch.autograd.grad(y2, (x, e), dy))
    for a, b in zip(got, want):
        assert rel(a, b) < 1e-5


@gpu_only
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


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("path", ["sample", "table-rows", "affine", "custom-op"])
def test_double_backward_is_refused_by_name(device, path):
    """create_graph=True gives first-order gradients that match eager_adaln's; differentiating
    them again raises an error naming the op and the eager alternative (without the refusal,
    CPU gave silently wrong second derivatives and CUDA torch's generic 'does not require
    grad')."""
    from suite.ops import eager_adaln

    x = randn(2, 8, 64, device=device, requires_grad=True)
    sc, sh = (randn(2, 64, device=device, requires_grad=True) for _ in range(2))
    e = randn(2, 6, 64, device=device, requires_grad=True)
    w, b = (randn(64, device=device, requires_grad=True) for _ in range(2))
    run = {
        "sample": lambda: adaln(x, sc, sh),
        "table-rows": lambda: adaln(x, e[:, 1], e[:, 0]),
        "affine": lambda: layer_norm_affine(x, w, b),
        "custom-op": lambda: torch.ops.adaln.forward(x, sc, sh, 1e-6, 0, x.dtype, "fused")[0],
    }[path]
    (g,) = torch.autograd.grad((run() ** 2).sum(), x, create_graph=True)
    if path == "sample":
        (want,) = torch.autograd.grad((eager_adaln(x, sc, sh) ** 2).sum(), x)
        assert rel(g.detach(), want) < 1e-4
    with pytest.raises(RuntimeError, match=r"fused AdaLN op .* no double backward.*eager_adaln"):
        torch.autograd.grad(g.sum(), x)
