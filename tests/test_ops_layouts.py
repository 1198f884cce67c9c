"""The fused AdaLN's entry points (adaln, AdaLN, layer_norm_affine, FusedLayerNorm) against a
float64 PyTorch reference over drawn shapes, dtypes and memory layouts: a legal input gives the
right answer (forward and every gradient, within the stated tolerance) or a ValueError that names
the argument, never a wrong number. The epilogues' entry points and a patched Wan block:
tests/test_epilogue_layouts.py; the layouts, draws and comparison: tests/layouts.py.

Drawn: B, N, D (1, odd, Wan's widths, the largest supported D and one past it); dtypes of x, of
the modulation and of the output; x contiguous, last dimension strided, transposed, sliced, offset
by one element, expanded over batch or tokens; modulation as separate tensors, rows of one
[B, 6, D] table (Wan's chunks, squeezed, of a transposed or wider table), broadcast over B, per
token (rows of Wan 2.2's [B, N, 6, D] too), scale and shift with different strides; gradients on
(all leaves, x only, modulation only) or off (requires_grad False, or torch.no_grad); autocast.
torch.compile is checked on fixed layouts (test_compiled_matches_eager): a compile per drawn
shape would make each draw take seconds.

On CPU (CI) the ops run their eager reference: the draws check the Python side (argument
handling, views, the table-row and broadcast paths). On a GPU they run the kernels, every
program the draws reach prebuilt first: `OUT=DIR SEED=N EXAMPLES=300 bash tools/device/ops_fuzz.sh`
(SUITE_FUZZ_EXAMPLES sets the draws per entry point; CI's default is 25).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from suite.ops import AdaLN, FusedLayerNorm, adaln, layer_norm_affine
from suite.ops.epilogue import residual_norm
from tests.layouts import (
    CUDA,
    DEVICES,
    FLOATS,
    FUZZ,
    GRAD_TOL,
    MAX_D,
    MOD_LAYOUTS,
    TOL,
    X_LAYOUTS,
    amplification,
    check_grads,
    coarsest,
    draw_generator,
    draw_grad,
    draw_mods,
    draw_shape,
    draw_x,
    leaf,
    mark_grads,
    mod_shape,
    ref_leaves,
    refused,
    rel,
    run,
)


# ------------------------------------------------------------------------------ adaln
def _adaln_ref(x, s, h, eps):
    y = F.layer_norm(x, (x.shape[-1],), eps=eps)
    if s.dim() == 2:
        s, h = s.unsqueeze(1), h.unsqueeze(1)
    return y * (1 + s) + h


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("entry", ["adaln", "AdaLN"])
@FUZZ
@given(data=st.data())
def test_adaln_any_layout(device, entry, data):
    gen = draw_generator(data)
    B, N, D = draw_shape(data, device)
    xdt = data.draw(st.sampled_from(FLOATS), label="x dtype")
    out_dtype = data.draw(st.sampled_from([None, torch.float32]), label="out_dtype")
    backward = data.draw(st.sampled_from(["fused", "dtile"]), label="backward")
    grad, autocast = draw_grad(data), data.draw(st.booleans(), label="autocast")
    eps = data.draw(st.sampled_from([1e-6, 1e-5]), label="eps")
    xleaf, xview = draw_x(data, B, N, D, xdt, device, gen)
    mleaves, mview, mdt = draw_mods(data, B, N, D, device, gen)
    leaves = [xleaf, *mleaves]
    needs = mark_grads(leaves, grad, 1)

    def call():
        x, (s, h) = xview(xleaf), mview(*mleaves)
        if entry == "AdaLN":
            return AdaLN(D, eps, out_dtype, backward)(x, s, h)
        return adaln(x, s, h, eps, out_dtype=out_dtype, backward=backward)

    try:
        y = run(call, grad, autocast, device)
    except ValueError as err:
        return refused(err, D, device)
    assert device == "cpu" or D <= MAX_D, "accepted a D past the kernels' limit"
    rl = ref_leaves(leaves, needs)
    s_ref, h_ref = mview(*rl[1:])
    yr = _adaln_ref(xview(rl[0]), s_ref, h_ref, eps)
    assert y.shape == (B, N, D) and y.dtype == (out_dtype or xdt)
    assert rel(y, yr) < TOL[y.dtype], (rel(y, yr), y.dtype)
    if needs:
        check_grads([y], [yr], leaves, rl, needs, lambda dt: GRAD_TOL[coarsest(dt, xdt, y.dtype)],
                     device, gen, {0: amplification(xview(rl[0]), xleaf, eps, gains=[1 + s_ref])})  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("entry", ["layer_norm_affine", "FusedLayerNorm"])
@FUZZ
@given(data=st.data())
def test_affine_layer_norm_any_layout(device, entry, data):
    gen = draw_generator(data)
    B, N, D = draw_shape(data, device)
    xdt = data.draw(st.sampled_from(FLOATS), label="x dtype")
    grad, autocast = draw_grad(data), data.draw(st.booleans(), label="autocast")
    xleaf, xview = draw_x(data, B, N, D, xdt, device, gen)
    if entry == "FusedLayerNorm":
        m = FusedLayerNorm(D).to(device)
        with torch.no_grad():
            m.weight.copy_(leaf((D,), torch.float32, device, gen, 0.5, 1.0))
            m.bias.copy_(leaf((D,), torch.float32, device, gen))
        leaves, wview = [xleaf, m.weight, m.bias], None
    else:
        wdt = data.draw(st.sampled_from(FLOATS), label="weight dtype")
        wl = data.draw(st.sampled_from(["contiguous", "strided", "rows-of-one"]), label="w layout")
        if wl == "rows-of-one":
            leaves, wview = (
                [xleaf, leaf((2, D), wdt, device, gen, 0.5, 1.0)],
                lambda t: (t[0], t[1]),
            )
        else:
            k = 2 if wl == "strided" else 1
            leaves = [xleaf, leaf((k * D,), wdt, device, gen, 0.5, 1.0),
                      leaf((k * D,), wdt, device, gen)]  # fmt: skip
            wview = lambda w, b: (w[::k], b[::k])  # noqa: E731
    needs = mark_grads(leaves, grad, 1)

    def call():
        x = xview(xleaf)
        return m(x) if wview is None else layer_norm_affine(x, *wview(*leaves[1:]))

    try:
        y = run(call, grad, autocast, device)
    except ValueError as err:
        return refused(err, D, device)
    rl = ref_leaves(leaves, needs)
    w, b = (rl[1], rl[2]) if wview is None else wview(*rl[1:])
    yr = F.layer_norm(xview(rl[0]), (D,), w, b, 1e-6)
    assert y.shape == (B, N, D) and y.dtype == xdt
    assert rel(y, yr) < TOL[xdt], rel(y, yr)
    if needs:
        check_grads([y], [yr], leaves, rl, needs, lambda dt: GRAD_TOL[coarsest(dt, xdt)],
                     device, gen, {0: amplification(xview(rl[0]), xleaf, gains=[w])})  # fmt: skip


# ------------------------------------------------------------------------------ caches
SEQUENCE = ["contiguous", "lastdim-strided", "offset-1", "token-major", "contiguous"]
MODS = ["table-rows", "table-chunks", "table-transposed", "sample-3d", "table-rows"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_same_shapes_second_layout_after_first(device, dtype):
    """The eager path caches what a call signature needs (specs, table rows, launch plans): the
    same shapes called again with another layout of x or of the modulation (other strides,
    offsets, table rows) must give that layout's answer, in either order."""
    B, N, D = 2, 1000, 1536
    gen = torch.Generator().manual_seed(0)
    for xl, ml in zip(SEQUENCE, MODS):
        shape, view = X_LAYOUTS[xl]
        xleaf = leaf(shape(B, N, D), dtype, device, gen, 2.0, 0.5).requires_grad_()
        kinds, mview = MOD_LAYOUTS[ml]
        mleaves = [leaf(mod_shape(k, B, N, D), dtype, device, gen, 0.5).requires_grad_()
                   for _, k in kinds]  # fmt: skip
        y = adaln(view(xleaf, B, N, D), *mview(*mleaves))
        rl = ref_leaves([xleaf, *mleaves], range(1 + len(mleaves)))
        yr = _adaln_ref(view(rl[0], B, N, D), *mview(*rl[1:]), 1e-6)
        assert rel(y, yr) < TOL[dtype], (xl, ml, rel(y, yr))
        check_grads([y], [yr], [xleaf, *mleaves], rl, list(range(1 + len(mleaves))),
                     lambda dt: GRAD_TOL[dt], device, gen)  # fmt: skip
        with torch.no_grad():  # the no-grad fast path keeps its own specs
            assert rel(adaln(view(xleaf, B, N, D), *mview(*mleaves)), yr) < TOL[dtype], (xl, ml)


def test_reported_case_wan_table_with_strided_x():
    """The case that once came back wrong on CUDA: bf16 x [2, 1000, 1536] with a strided last
    dimension, scale/shift rows of one [B, 6, D] table (Wan's e[:, 1:2], e[:, 0:1])."""
    device = "cuda" if CUDA else "cpu"
    gen = torch.Generator().manual_seed(3)
    xleaf = leaf((2, 1000, 2 * 1536), torch.bfloat16, device, gen, 2.0).requires_grad_()
    e = leaf((2, 6, 1536), torch.bfloat16, device, gen, 0.5).requires_grad_()
    for backward in ("fused", "dtile"):
        y = adaln(xleaf[..., ::2], e[:, 1:2], e[:, 0:1], backward=backward)
        rl = ref_leaves([xleaf, e], [0, 1])
        yr = _adaln_ref(rl[0][..., ::2], rl[1][:, 1:2], rl[1][:, 0:1], 1e-6)
        assert rel(y, yr) < TOL[torch.bfloat16]
        check_grads([y], [yr], [xleaf, e], rl, [0, 1], lambda dt: GRAD_TOL[dt], device, gen)


def test_batch_one_scale_and_shift_of_different_layouts():
    """B = 1, scale a [1, 1, D] tensor of its own and shift row 0 of a [1, 6, D] table: their
    strides differ only in the length-1 batch dimension, which .contiguous() leaves alone. The
    GPU fuzz once saw the launch plan refuse this legal input; it must compute it."""
    device = "cuda" if CUDA else "cpu"
    gen = torch.Generator().manual_seed(4)
    x = leaf((1, 33, 1536), torch.float32, device, gen).requires_grad_()
    s = leaf((1, 1, 1536), torch.float32, device, gen, 0.5).requires_grad_()
    e = leaf((1, 6, 1536), torch.float32, device, gen, 0.5).requires_grad_()
    for backward in ("fused", "dtile"):
        y = adaln(x, s, e[:, 0:1], backward=backward)
        rl = ref_leaves([x, s, e], [0, 1, 2])
        yr = _adaln_ref(rl[0], rl[1], rl[2][:, 0:1], 1e-6)
        assert rel(y, yr) < TOL[torch.float32]
        check_grads([y], [yr], [x, s, e], rl, [0, 1, 2], lambda dt: GRAD_TOL[dt], device, gen)


# ------------------------------------------------------------------------------ compile
COMPILED = [
    ("lastdim-strided", "table-rows"),
    ("offset-1", "per-token"),
    ("token-major", "sample-2d"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("xl,ml", COMPILED)
def test_compiled_matches_eager(device, xl, ml):
    """torch.compile(fullgraph=True) of adaln and residual_norm on layouts the eager fast paths
    treat specially: the same values as eager, gradients too."""
    torch._dynamo.reset()
    B, N, D = 2, 33, 64
    gen = torch.Generator().manual_seed(1)
    shape, view = X_LAYOUTS[xl]
    kinds, mview = MOD_LAYOUTS[ml]
    xleaf = leaf(shape(B, N, D), torch.float32, device, gen).requires_grad_()
    mleaves = [leaf(mod_shape(k, B, N, D), torch.float32, device, gen, 0.5).requires_grad_()
               for _, k in kinds]  # fmt: skip

    def fn(xl_, *ms):
        x = view(xl_, B, N, D)
        s, h = mview(*ms)
        y = adaln(x, s, h)
        return residual_norm(x, y, scale=s, shift=h)[1] + y

    leaves = [xleaf, *mleaves]
    up = torch.randn(B, N, D, generator=gen).to(device)
    eager = fn(*leaves)
    ge = torch.autograd.grad(eager, leaves, up)
    comp = torch.compile(fn, fullgraph=True)(*leaves)
    gc = torch.autograd.grad(comp, leaves, up)
    torch.testing.assert_close(comp, eager, rtol=1e-5, atol=1e-5)
    for a, b in zip(gc, ge):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
