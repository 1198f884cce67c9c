"""The fused epilogues' layout property test (residual_norm, rms_norm, and a Wan block patched by
patch_wan) against float64 over drawn shapes, dtypes and layouts: the right answer or a
ValueError that names the argument. The drawn layouts and the comparison: tests/layouts.py;
the AdaLN entry points: tests/test_ops_layouts.py (its docstring says how a GPU run is made)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suite.ops.epilogue import residual_norm, rms_norm
from tests.layouts import (
    DEVICES,
    EPI_GRAD,
    EXAMPLES,
    FLOATS,
    FUZZ,
    GATES,
    GRAD_TOL,
    TOL,
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

# ------------------------------------------------------------------------------ epilogues


@pytest.mark.parametrize("device", DEVICES)
@FUZZ
@given(data=st.data())
def test_residual_norm_any_layout(device, data):
    gen = draw_generator(data)
    B, N, D = draw_shape(data, device)
    xdt = data.draw(st.sampled_from([torch.float32, torch.bfloat16]), label="x dtype")
    out_dtype = data.draw(st.sampled_from([None, torch.float32]), label="out_dtype")
    grad, autocast = draw_grad(data), data.draw(st.booleans(), label="autocast")
    xleaf, xview = draw_x(data, B, N, D, xdt, device, gen)
    yleaf, yview = draw_x(data, B, N, D, xdt, device, gen, label="y")
    leaves, views = [xleaf, yleaf], {}
    gname = data.draw(st.sampled_from(sorted(GATES)), label="gate layout")
    if GATES[gname] is not None:
        kind, view = GATES[gname]
        gdt = data.draw(st.sampled_from(FLOATS), label="gate dtype")
        leaves.append(leaf(mod_shape(abs(kind), 1 if kind < 0 else B, N, D), gdt, device, gen, 0.5))
        views["gate"] = (len(leaves) - 1, view)
    if data.draw(st.booleans(), label="modulated"):
        mleaves, mview, _ = draw_mods(data, B, N, D, device, gen)
        first = len(leaves)
        leaves += mleaves
        views["mod"] = (first, len(leaves), mview)
    if data.draw(st.booleans(), label="affine"):
        wdt = data.draw(st.sampled_from(FLOATS), label="weight dtype")
        leaves += [leaf((D,), wdt, device, gen, 0.5, 1.0), leaf((2 * D,), wdt, device, gen)]
        views["affine"] = len(leaves) - 2
    needs = mark_grads(leaves, grad, 2)

    def operands(ls):
        kw = {}
        if "gate" in views:
            i, view = views["gate"]
            kw["gate"] = view(ls[i])
        if "mod" in views:
            a, b, mview = views["mod"]
            kw["scale"], kw["shift"] = mview(*ls[a:b])
        if "affine" in views:
            i = views["affine"]
            kw["weight"], kw["bias"] = ls[i], ls[i + 1][::2]
        return kw

    def call():
        return residual_norm(xview(xleaf), yview(yleaf), **operands(leaves), out_dtype=out_dtype)

    try:
        x_new, normed = run(call, grad, autocast, device)
    except ValueError as err:
        return refused(err, D, device)
    rl = ref_leaves(leaves, needs)
    kw = operands(rl)
    g = kw.get("gate")
    g = 1.0 if g is None else (g.unsqueeze(1) if g.dim() == 2 else g)
    xn = xview(rl[0]) + yview(rl[1]) * g
    # the op normalises x_new as stored (rounded to x's dtype, as diffusers' block does);
    # autograd treats that rounding as identity, so the reference passes gradients straight through
    xs = xn + (xn.to(xdt).double() - xn).detach()
    nr = F.layer_norm(xs, (D,), kw.get("weight"), kw.get("bias"), 1e-6)
    if "scale" in kw:
        s, h = kw["scale"], kw["shift"]
        s, h = (s.unsqueeze(1), h.unsqueeze(1)) if s.dim() == 2 else (s, h)
        nr = nr * (1 + s) + h
    assert x_new.dtype == xdt and normed.dtype == (out_dtype or xdt)
    assert rel(x_new, xn) < TOL[xdt] and rel(normed, nr) < TOL[xdt], (
        rel(x_new, xn),
        rel(normed, nr),
    )
    if needs:
        gains = (kw.get("weight"), 1 + kw["scale"] if "scale" in kw else None)
        a = max(amplification(xs, xleaf, gains=gains), amplification(xs, yleaf, gains=gains))
        check_grads([x_new, normed], [xn, nr], leaves, rl, needs,
                     lambda dt: EPI_GRAD * GRAD_TOL[coarsest(dt, xdt)], device, gen,
                     {0: a, 1: a})  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@FUZZ
@given(data=st.data())
def test_rms_norm_any_layout(device, data):
    gen = draw_generator(data)
    B, N, D = draw_shape(data, device)
    xdt = data.draw(st.sampled_from([torch.float32, torch.bfloat16]), label="x dtype")
    grad, autocast = draw_grad(data), data.draw(st.booleans(), label="autocast")
    xleaf, xview = draw_x(data, B, N, D, xdt, device, gen)
    wdt = data.draw(st.sampled_from(FLOATS), label="weight dtype")
    k = data.draw(st.sampled_from([1, 2]), label="weight stride")
    leaves = [xleaf, leaf((k * D,), wdt, device, gen, 0.5, 1.0)]
    needs = mark_grads(leaves, grad, 1)
    try:
        y = run(lambda: rms_norm(xview(xleaf), leaves[1][::k]), grad, autocast, device)
    except ValueError as err:
        return refused(err, D, device)
    rl = ref_leaves(leaves, needs)
    xr = xview(rl[0])
    yr = xr * torch.rsqrt(xr.square().mean(-1, keepdim=True) + 1e-6) * rl[1][::k]
    assert y.shape == (B, N, D) and y.dtype == xdt
    assert rel(y, yr) < TOL[xdt], rel(y, yr)
    if needs:
        check_grads([y], [yr], leaves, rl, needs, lambda dt: GRAD_TOL[coarsest(dt, xdt)],
                     device, gen, {0: amplification(xr, xleaf, rms=True, gains=[rl[1][::k]])})  # fmt: skip


# ------------------------------------------------------------------------------ diffusers patch
@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=max(4, EXAMPLES // 5), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(data=st.data())
def test_patched_block_any_layout(device, data):
    """A patched Wan block (AdaLN, and the epilogues when drawn) against the same block
    unpatched, in float32, with hidden_states in a drawn layout and Wan 2.1's [B, 6, D] or
    Wan 2.2's per-token [B, N, 6, D] modulation."""
    import copy

    from suite.model.wan import build_wan
    from suite.ops.diffusers import patch_wan

    gen = draw_generator(data)
    epilogues = data.draw(st.booleans(), label="epilogues")
    B = data.draw(st.integers(1, 2), label="B")
    f, h, w = (data.draw(st.integers(1, 3), label=k) for k in "fhw")
    ref = build_wan("tiny", layers=1, dtype=torch.float32, device=device)
    new = patch_wan(copy.deepcopy(ref), epilogues=epilogues)
    latents = torch.randn(B, ref.config.in_channels, f, 2 * h, 2 * w, generator=gen)  # patch 1x2x2
    rope = ref.rope(latents.to(device))
    N, D = f * h * w, ref.config.num_attention_heads * ref.config.attention_head_dim
    xleaf, xview = draw_x(data, B, N, D, torch.float32, device, gen)
    per_token = data.draw(st.booleans(), label="per-token temb")
    temb = leaf((B, N, 6, D) if per_token else (B, 6, D), torch.float32, device, gen, 0.3)
    text = leaf((B, 5, D), torch.float32, device, gen)
    outs = []
    for model in (ref, new):
        leaves = [t.detach().clone().requires_grad_() for t in (xleaf, temb, text)]
        y = model.blocks[0](xview(leaves[0]), leaves[2], leaves[1], rope)
        up = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(device)
        outs.append((y.detach(), torch.autograd.grad(y, leaves, up)))
    (y_r, g_r), (y_n, g_n) = outs
    assert rel(y_n, y_r) < 1e-4, rel(y_n, y_r)
    for name, a, b in zip(("x", "temb", "text"), g_n, g_r):
        assert rel(a, b) < 1e-3, (name, rel(a, b))
