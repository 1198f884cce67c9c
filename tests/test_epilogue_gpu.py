"""GPU tests of the fused epilogue kernels against float64 (forward and gradients), bitwise
determinism over repeats, torch.compile without graph breaks, and device errors.

Every check draws fresh random inputs and poisons the allocator with NaN first, so an output
element a kernel forgot to write shows up as NaN."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from suite.ops.epilogue import residual_norm, rms_norm

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
TOL = {torch.float32: 2e-5, torch.bfloat16: 1.5e-2}
_seed = [0]


def rel(a, b) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


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


def chain64(x, y, ops, eps=1e-6):
    d = {k: (v.double() if v is not None else None) for k, v in ops.items()}
    xn = x.double() + y.double() * (d["gate"] if d["gate"] is not None else 1.0)
    n = F.layer_norm(xn, (x.shape[-1],), d["weight"], d["bias"], eps)
    if d["scale"] is not None:
        n = n * (1 + d["scale"]) + d["shift"]
    return xn, n


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


CASES = [
    ("sample", "sample", False),
    ("sample", "none", True),
    ("none", "sample", False),
    ("token", "token", False),
    ("none", "none", False),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("D", [1536, 3072, 5120, 1000, 1001])
@pytest.mark.parametrize("gate,mod,affine", CASES)
def test_residual_norm_fuzz(gate, mod, affine, D, dtype):
    for B, N in [(1, 1), (3, 333)]:  # N not a multiple of any CTA's rows
        check_against_float64(B, N, D, dtype, gate, mod, affine)


@pytest.mark.parametrize("D", [1536, 5120, 1001])
def test_strided_rows_of_the_modulation_table(D):
    check_against_float64(2, 257, D, torch.bfloat16, "", "", False, table=True)


def test_every_operand_at_once_and_fp32_output():
    check_against_float64(2, 100, 3072, torch.bfloat16, "sample", "sample", True)
    x, y, ops, _ = make(2, 50, 1536, torch.bfloat16, "sample", "sample", False)
    x_new, n = call(x, y, ops, out_dtype=torch.float32)
    assert n.dtype == torch.float32 and rel(n, chain64(x, y, ops)[1]) < 5e-3


def test_non_contiguous_and_misaligned_x():
    """A token-strided x (every other row; vector loads) and one starting 2 bytes past 16-byte
    alignment (the scalar path) both match float64."""
    check_against_float64(2, 64, 1536, torch.bfloat16, "sample", "sample", False,
                          xform=lambda t: t.repeat(1, 2, 1)[:, ::2])  # fmt: skip
    check_against_float64(1, 64, 1536, torch.bfloat16, "sample", "none", True,
                          xform=lambda t: torch.cat([t.flatten()[:1], t.flatten()])[1:]
                          .view(t.shape))  # fmt: skip


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
