"""Tests of the fused epilogue ops (suite/ops/epilogue/op.py), on each device where a test means
the same on both: residual_norm's forward and gradients against a float64 autograd chain.
CPU only: the eager reference against diffusers' own ops, rms_norm equal to torch's, argument
validation, the registered custom ops (torch.library.opcheck), torch.compile (aot_eager).
CUDA only: the kernels against float64 over widths, strided, non-contiguous and misaligned
operands, bitwise determinism, torch.compile (inductor), a host operand beside a CUDA x. The
kernels' NVRTC builds: tests/test_epilogue_kernels_cpu.py.

Every GPU check draws fresh random inputs and poisons the allocator with NaN first, so an output
element a kernel forgot to write shows up as NaN."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from suite.ops.epilogue import reference as ref
from suite.ops.epilogue.op import residual_norm, residual_norm_op, rms_norm, rms_norm_op
from tests.layouts import DEVICES, gpu_only

TOL = {torch.float32: 2e-5, torch.bfloat16: 1.5e-2}
B, N, D = 2, 7, 48
_seed = [0]


def rel(a, b) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def _inputs(dtype, gate, mod, affine, seed=0, device="cpu"):
    """x, y and operands [B, N, D] drawn on the host (the same numbers on every device), moved."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape, dt=torch.float32, s=1.0):
        return (torch.randn(*shape, generator=g) * s).to(device, dt).requires_grad_()

    shape = {"none": None, "sample": (B, 1, D), "token": (B, N, D)}
    x, y = r(B, N, D, dt=dtype), r(B, N, D, dt=dtype)
    ops = {
        "gate": r(*shape[gate], s=0.5) if shape[gate] else None,
        "scale": r(*shape[mod], s=0.3) if shape[mod] else None,
        "shift": r(*shape[mod], s=0.3) if shape[mod] else None,
        "weight": r(D, s=0.5) if affine else None,
        "bias": r(D, s=0.5) if affine else None,
    }
    return x, y, ops


def chain64(x, y, ops, eps=1e-6):
    """The block's arithmetic in float64 (rounding of x_new treated as identity, as autograd
    treats a cast)."""
    d = {k: (v.double() if v is not None else None) for k, v in ops.items()}
    xn = x.double() + y.double() * (d["gate"] if d["gate"] is not None else 1.0)
    n = F.layer_norm(xn, (x.shape[-1],), d["weight"], d["bias"], eps)
    if d["scale"] is not None:
        n = n * (1 + d["scale"]) + d["shift"]
    return xn, n


CASES = [
    ("sample", "sample", False),  # attn1 residual into a modulated norm (Wan 2.1)
    ("sample", "none", True),  # attn1 residual into norm2 (affine, cross_attn_norm)
    ("none", "sample", False),  # attn2 residual into norm3 + modulation
    ("token", "token", False),  # Wan 2.2's per-token modulation
    ("none", "none", False),
    ("sample", "sample", True),  # every operand (the GPU fuzz: test_every_operand_at_once...)
]


# ----------------------------------------------------------------------------- both devices
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("gate,mod,affine", CASES)
def test_residual_norm_matches_float64(dtype, gate, mod, affine, device):
    x, y, ops = _inputs(dtype, gate, mod, affine, device=device)
    x_new, normed = residual_norm(
        x, y, ops["gate"], **{k: v for k, v in ops.items() if k != "gate"}
    )
    xn64, n64 = chain64(x, y, ops)
    assert x_new.dtype == dtype and normed.dtype == dtype
    assert rel(x_new, xn64) < TOL[dtype] / 3 and rel(normed, n64) < TOL[dtype]
    gx, gn = torch.randn_like(xn64), torch.randn_like(n64)
    (x_new.double() * gx + normed.double() * gn).sum().backward()
    leaves = {"x": x, "y": y, **{k: v for k, v in ops.items() if v is not None}}
    want = torch.autograd.grad((xn64 * gx + n64 * gn).sum(), list(leaves.values()))
    for (name, t), w in zip(leaves.items(), want):
        assert t.grad is not None and t.grad.shape == t.shape, name
        assert rel(t.grad, w) < 4 * TOL[dtype], (name, rel(t.grad, w))


@pytest.mark.parametrize("device", DEVICES)
def test_out_dtype_float32_from_bf16(device):
    x, y, ops = _inputs(torch.bfloat16, "sample", "sample", False, device=device)
    x_new, n = residual_norm(x, y, ops["gate"], scale=ops["scale"], shift=ops["shift"],
                             out_dtype=torch.float32)  # fmt: skip
    assert x_new.dtype == torch.bfloat16 and n.dtype == torch.float32
    _, n64 = chain64(x, y, ops)
    assert rel(n, n64) < 5e-3  # only x_new's rounding left


# ----------------------------------------------------------------------------- CPU only
def test_residual_norm_matches_diffusers_block_ops():
    """Against WanTransformerBlock's own expressions in bf16 (diffusers' rounding points)."""
    x, y, ops = _inputs(torch.bfloat16, "sample", "sample", False, seed=3)
    e = ops
    ours = residual_norm(x, y, e["gate"], scale=e["scale"], shift=e["shift"])
    theirs = ref.diffusers_residual_norm(x, y, e["gate"], e["scale"], e["shift"], None, None)
    assert torch.equal(ours[0], theirs[0])  # x_new: one fp32 FMA vs mul+add, same bf16 here
    assert rel(ours[1], theirs[1]) < 1e-2


def test_strided_rows_of_one_modulation_table():
    """gate/scale/shift as rows of Wan's [B, 6, D] table: the gradient lands in those rows."""
    x, y, _ = _inputs(torch.float32, "none", "none", False)
    e = torch.randn(B, 6, D, requires_grad=True)
    x_new, n = residual_norm(x, y, e[:, 2:3], scale=e[:, 1:2], shift=e[:, 0:1])
    r = torch.randn(B, N, D)
    (x_new.sum() + (n * r).sum()).backward()
    assert e.grad[:, 3:].abs().max() == 0 and e.grad[:, :3].abs().min() > 0
    e2 = e.detach().clone().requires_grad_()
    xn64, n64 = chain64(x, y, {"gate": e2[:, 2:3], "scale": e2[:, 1:2], "shift": e2[:, 0:1],
                                "weight": None, "bias": None})  # fmt: skip
    (xn64.sum() + (n64 * r).sum()).backward()
    assert rel(e.grad, e2.grad) < 1e-5


def test_batch_one_operand_broadcasts_and_sums_its_gradient():
    x, y, _ = _inputs(torch.float32, "none", "none", False)
    gate = torch.randn(1, 1, D, requires_grad=True)
    x_new, n = residual_norm(x, y, gate)
    r = torch.randn(B, N, D)  # sum(n^2) would be ~constant: no gradient to compare
    (n * r).sum().backward()
    g64 = gate.detach().double().requires_grad_()
    _, n64 = chain64(x, y, {"gate": g64, "scale": None, "shift": None, "weight": None,
                             "bias": None})  # fmt: skip
    (n64 * r).sum().backward()
    assert gate.grad.shape == (1, 1, D) and rel(gate.grad, g64.grad) < 1e-5


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_rms_norm_is_torch_rmsnorm(dtype):
    x = torch.randn(3, 5, 4, 32).to(dtype).requires_grad_()
    w = torch.randn(32, requires_grad=True)
    yv = rms_norm(x, w)
    want = F.rms_norm(x.detach(), (32,), w.detach(), 1e-6)
    assert yv.dtype == dtype and yv.shape == x.shape
    assert torch.equal(yv, want)  # the same fp32 arithmetic, one rounding
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    gy = torch.randn(x.shape, dtype=torch.float64)
    (yv.double() * gy).sum().backward()
    (F.rms_norm(x64, (32,), w64, 1e-6) * gy).sum().backward()
    assert rel(x.grad, x64.grad) < 4 * TOL[dtype] and rel(w.grad, w64.grad) < 4 * TOL[dtype]


def test_rms_norm_bf16_weight_used_in_fp32():
    x, w = torch.randn(4, 64), torch.randn(64).bfloat16()
    assert torch.equal(rms_norm(x, w), F.rms_norm(x, (64,), w.float(), 1e-6))


# ----------------------------------------------------------------------------- validation
def _x():
    return torch.randn(B, N, D, dtype=torch.bfloat16)


@pytest.mark.parametrize(
    "kwargs,err,match",
    [
        (dict(x=torch.randn(N, D)), ValueError, r"x must be \[B, N, D\]"),
        (dict(x=torch.randn(B, N, D).half()), TypeError, "x must be float32 or bfloat16"),
        (dict(y=torch.randn(B, N, D)), ValueError, "y must match x"),
        (dict(y=torch.randn(B, N + 1, D).bfloat16()), ValueError, "y must match x"),
        (dict(gate=torch.randn(B, 1, D + 1)), ValueError, r"gate must be \[B, D\]"),
        (dict(gate=torch.randn(B, 3, D)), ValueError, "N=7"),
        (dict(gate=torch.ones(B, 1, D, dtype=torch.int32)), TypeError, "gate must be float32"),
        (dict(scale=torch.randn(B, 1, D)), ValueError, "scale and shift come together"),
        (dict(scale=torch.randn(B, 1, D), shift=torch.randn(B, N, D)), ValueError, "one shape"),
        (dict(weight=torch.randn(D, 1)), ValueError, r"weight must be \[D\]"),
        (dict(bias=torch.randn(D + 1)), ValueError, r"bias must be \[D\]"),
        (dict(out_dtype=torch.float16), TypeError, "out_dtype must be"),
        (dict(y="nope"), TypeError, "y must be a torch.Tensor"),
    ],
)
def test_residual_norm_argument_errors(kwargs, err, match):
    args = dict(x=_x(), y=_x(), gate=None)
    args.update(kwargs)
    x, y, gate = args.pop("x"), args.pop("y"), args.pop("gate")
    with pytest.raises(err, match=match):
        residual_norm(x, y, gate, **args)


@pytest.mark.parametrize("name", ["y", "gate", "scale", "weight"])
def test_every_operand_on_x_device(name):
    """An operand on another device than x is a ValueError naming it and both devices (a CPU
    operand beside a CUDA x would otherwise hand the kernel a host pointer)."""
    x = torch.empty(B, N, D, dtype=torch.bfloat16, device="meta")
    args = dict(y=torch.empty_like(x))
    other = {
        "y": torch.randn(B, N, D).bfloat16(),
        "gate": torch.randn(B, 1, D),
        "scale": torch.randn(B, 1, D),
        "weight": torch.randn(D),
    }
    args[name] = other[name]
    if name == "scale":
        args["shift"] = torch.empty(B, 1, D, device="meta")
    y = args.pop("y")
    with pytest.raises(ValueError, match=rf"{name} is on cpu but x is on meta"):
        residual_norm(x, y, **args)


def test_rms_norm_argument_errors():
    with pytest.raises(TypeError, match="x must be float32 or bfloat16"):
        rms_norm(torch.randn(4, 8).half(), torch.randn(8))
    with pytest.raises(ValueError, match=r"weight must be \[D\] = \[8\]"):
        rms_norm(torch.randn(4, 8), torch.randn(7))
    with pytest.raises(ValueError, match="weight is on cpu but x is on meta"):
        rms_norm(torch.empty(4, 8, device="meta"), torch.randn(8))
    with pytest.raises(TypeError, match="weight must be a torch.Tensor"):
        rms_norm(torch.randn(4, 8), None)


# ----------------------------------------------------------------------------- custom ops
def test_opcheck_custom_ops():
    x, y, ops = _inputs(torch.float32, "sample", "sample", False)
    g, s, h = (ops[k].detach().expand(B, 1, D) for k in ("gate", "scale", "shift"))
    args = (x.detach(), y.detach(), g, s, h, None, None, 1e-6, torch.float32)
    torch.library.opcheck(residual_norm_op, args)
    w = torch.randn(D)
    torch.library.opcheck(rms_norm_op, (x.detach(), w, 1e-6))


def test_torch_compile_fullgraph_forward_and_backward():
    x, y, ops = _inputs(torch.float32, "sample", "sample", True)

    def block(x, y, gate, scale, shift, weight, bias, q, wq):
        x1, n1 = residual_norm(x, y, gate, weight=weight, bias=bias)
        x2, n2 = residual_norm(x1, n1, scale=scale, shift=shift)
        return x2, n2, rms_norm(q, wq)

    q, wq = torch.randn(B, N, D, requires_grad=True), torch.randn(D, requires_grad=True)
    args = (x, y, *ops.values(), q, wq)
    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    outs_c, outs_e = compiled(*args), block(*args)
    for a, b in zip(outs_c, outs_e):
        assert torch.equal(a, b)
    leaves = [t for t in args if t is not None]
    gc = torch.autograd.grad(sum(o.square().sum() for o in outs_c), leaves)
    ge = torch.autograd.grad(sum(o.square().sum() for o in outs_e), leaves)
    for a, b in zip(gc, ge):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- CUDA only
def poison(nbytes: int) -> None:
    """Fill freed allocator blocks with 0xFF (NaN in bf16 and fp32)."""
    buf = torch.full((nbytes + 4096,), 255, dtype=torch.uint8, device="cuda")
    del buf


def rand(*shape, dtype=torch.float32, s=1.0):
    _seed[0] += 1
    g = torch.Generator(device="cuda").manual_seed(_seed[0])
    return (torch.randn(*shape, device="cuda", generator=g) * s).to(dtype)


def make(B, N, D, dtype, gate, mod, affine, table=False):
    """x, y and operands; table: gate/scale/shift as strided rows of one [B, 6, D] tensor."""
    x, y = rand(B, N, D, dtype=dtype), rand(B, N, D, dtype=dtype)
    ops = dict.fromkeys(["gate", "scale", "shift", "weight", "bias"])
    rows = {"sample": 1, "token": N}
    if table:
        e = rand(B, 6, D, s=0.4).requires_grad_()
        ops.update(gate=e[:, 2:3], scale=e[:, 1:2], shift=e[:, 0:1])
        leaves = {"x": x, "y": y, "e": e}
    else:
        if gate != "none":
            ops["gate"] = rand(B, rows[gate], D, s=0.5)
        if mod != "none":
            ops["scale"], ops["shift"] = rand(B, rows[mod], D, s=0.3), rand(B, rows[mod], D, s=0.3)
        if affine:
            ops["weight"], ops["bias"] = rand(D, s=0.5) + 1, rand(D, s=0.5)
        for v in ops.values():
            if v is not None:
                v.requires_grad_()
        leaves = {"x": x, "y": y, **{k: v for k, v in ops.items() if v is not None}}
    x.requires_grad_()
    y.requires_grad_()
    return x, y, ops, leaves


def call(x, y, ops, **kw):
    return residual_norm(x, y, ops["gate"], **{k: v for k, v in ops.items() if k != "gate"}, **kw)


def check_against_float64(B, N, D, dtype, gate, mod, affine, table=False, xform=None):
    x, y, ops, leaves = make(B, N, D, dtype, gate, mod, affine, table)
    xi, yi = (xform(x), xform(y)) if xform else (x, y)
    poison(8 * B * N * D * 4)
    x_new, n = call(xi, yi, ops)
    assert torch.isfinite(x_new).all() and torch.isfinite(n).all()
    xn64, n64 = chain64(xi, yi, ops)
    assert rel(x_new, xn64) < TOL[dtype] / 3, rel(x_new, xn64)
    assert rel(n, n64) < TOL[dtype], rel(n, n64)
    gx, gn = torch.randn_like(xn64), torch.randn_like(n64)
    got = torch.autograd.grad((x_new.double() * gx + n.double() * gn).sum(), list(leaves.values()))
    want = torch.autograd.grad((xn64 * gx + n64 * gn).sum(), list(leaves.values()))
    for name, a, w in zip(leaves, got, want):
        assert torch.isfinite(a).all(), name
        assert rel(a, w) < 4 * TOL[dtype], (name, rel(a, w))


@gpu_only
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("D", [1536, 3072, 5120, 1000, 1001])
@pytest.mark.parametrize("gate,mod,affine", CASES[:5])  # the sixth: test_every_operand_at_once
def test_residual_norm_fuzz(gate, mod, affine, D, dtype):
    for B, N in [(1, 1), (3, 333)]:  # N not a multiple of any CTA's rows
        check_against_float64(B, N, D, dtype, gate, mod, affine)


@gpu_only
@pytest.mark.parametrize("D", [1536, 5120, 1001])
def test_strided_rows_of_the_modulation_table(D):
    check_against_float64(2, 257, D, torch.bfloat16, "", "", False, table=True)


@gpu_only
def test_every_operand_at_once_and_fp32_output():
    check_against_float64(2, 100, 3072, torch.bfloat16, "sample", "sample", True)
    x, y, ops, _ = make(2, 50, 1536, torch.bfloat16, "sample", "sample", False)
    x_new, n = call(x, y, ops, out_dtype=torch.float32)
    assert n.dtype == torch.float32 and rel(n, chain64(x, y, ops)[1]) < 5e-3


@gpu_only
def test_non_contiguous_and_misaligned_x():
    """A token-strided x (every other row; vector loads) and one starting 2 bytes past 16-byte
    alignment (the scalar path) both match float64."""
    check_against_float64(2, 64, 1536, torch.bfloat16, "sample", "sample", False,
                          xform=lambda t: t.repeat(1, 2, 1)[:, ::2])  # fmt: skip
    check_against_float64(1, 64, 1536, torch.bfloat16, "sample", "none", True,
                          xform=lambda t: torch.cat([t.flatten()[:1], t.flatten()])[1:]
                          .view(t.shape))  # fmt: skip


@gpu_only
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("D", [128, 1536, 5120, 1001])
def test_rms_norm_fuzz(D, dtype):
    x = rand(2, 333, D, dtype=dtype).requires_grad_()
    w = (rand(D, s=0.5) + 1).requires_grad_()
    poison(8 * x.numel() * 4)
    yv = rms_norm(x, w)
    ref = F.rms_norm(x.detach().double(), (D,), w.detach().double(), 1e-6)
    assert yv.dtype == dtype and rel(yv, ref) < TOL[dtype]
    assert rel(yv, F.rms_norm(x.detach(), (D,), w.detach(), 1e-6)) < TOL[dtype]
    gy = torch.randn_like(ref)
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    got = torch.autograd.grad((yv.double() * gy).sum(), [x, w])
    want = torch.autograd.grad((F.rms_norm(x64, (D,), w64, 1e-6) * gy).sum(), [x64, w64])
    for a, b in zip(got, want):
        assert rel(a, b) < 4 * TOL[dtype]


@gpu_only
def test_bitwise_deterministic_over_repeats():
    x, y, ops, leaves = make(2, 4096, 1536, torch.bfloat16, "sample", "sample", False)
    q, wq = rand(2, 4096, 1536, dtype=torch.bfloat16).requires_grad_(), rand(1536).requires_grad_()
    runs = []
    for _ in range(5):
        x_new, n = call(x, y, ops)
        k = rms_norm(q, wq)
        loss = (x_new.float().sum() + n.float().square().sum()) + k.float().square().sum()
        grads = torch.autograd.grad(loss, [*leaves.values(), q, wq])
        runs.append([x_new, n, k, *grads])
    for r in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], r))


@gpu_only
def test_torch_compile_fullgraph_matches_eager():
    torch._dynamo.reset()
    x, y, ops, leaves = make(2, 300, 1536, torch.bfloat16, "sample", "sample", False)
    q, wq = rand(2, 300, 1536, dtype=torch.bfloat16).requires_grad_(), rand(1536).requires_grad_()

    def block(x, y, gate, scale, shift, q, wq):
        x1, n1 = residual_norm(x, y, gate, scale=scale, shift=shift)
        return x1, n1, rms_norm(q, wq)

    args = (x, y, ops["gate"], ops["scale"], ops["shift"], q, wq)
    compiled = torch.compile(block, fullgraph=True)
    outs_c, outs_e = compiled(*args), block(*args)
    for a, b in zip(outs_c, outs_e):
        assert torch.equal(a, b)
    inputs = [*leaves.values(), q, wq]
    gc = torch.autograd.grad(sum(o.float().square().sum() for o in outs_c), inputs)
    ge = torch.autograd.grad(sum(o.float().square().sum() for o in outs_e), inputs)
    for a, b in zip(gc, ge):
        assert rel(a, b) < 1e-6


@gpu_only
@pytest.mark.parametrize("name", ["y", "gate", "scale", "weight"])
def test_cpu_operand_with_cuda_x_is_a_clear_error(name):
    x = rand(1, 8, 64, dtype=torch.bfloat16)
    args = dict(y=rand(1, 8, 64, dtype=torch.bfloat16))
    cpu = {"y": args["y"].cpu(), "gate": torch.randn(1, 1, 64), "scale": torch.randn(1, 1, 64),
           "weight": torch.randn(64)}  # fmt: skip
    args[name] = cpu[name]
    if name == "scale":
        args["shift"] = rand(1, 1, 64)
    y = args.pop("y")
    with pytest.raises(ValueError, match=rf"{name} is on cpu but x is on cuda:0"):
        residual_norm(x, y, **args)
    torch.cuda.synchronize()  # nothing was launched with a host pointer


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["residual_norm", "rms_norm"])
def test_double_backward_is_refused_by_name(device, op):
    """A gradient taken with create_graph=True cannot be differentiated again: the error names
    the op and its eager reference (not torch's generic 'does not require grad')."""
    x, y = (torch.randn(2, 8, 64, device=device, requires_grad=True) for _ in range(2))
    w = torch.randn(64, device=device, requires_grad=True)
    out = residual_norm(x, y, weight=w, bias=w)[1] if op == "residual_norm" else rms_norm(x, w)
    (g,) = torch.autograd.grad((out**2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match=rf"epilogue\.{op} has no double backward.*reference"):
        torch.autograd.grad(g.sum(), x)
