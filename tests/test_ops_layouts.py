"""Every public entry point of the fused ops against a float64 PyTorch reference, over drawn
shapes, dtypes and memory layouts: a legal input gives the right answer (forward and every
gradient, within the stated tolerance) or a ValueError that names the argument, never a wrong
number. Entry points: adaln, AdaLN, layer_norm_affine, FusedLayerNorm, residual_norm, rms_norm and
a block patched by patch_wan.

Drawn: B, N, D (1, odd, Wan's widths, the largest supported D and one past it); dtypes of x, of
the modulation and of the output; x contiguous, last dimension strided, transposed, sliced, offset
by one element, expanded over batch or tokens; modulation as separate tensors, rows of one
[B, 6, D] table (Wan's chunks, squeezed, of a transposed or wider table), broadcast over B, per
token (rows of Wan 2.2's [B, N, 6, D] too), scale and shift with different strides; gradients on
(all leaves, x only, modulation only) or off (requires_grad False, or torch.no_grad); autocast.
torch.compile is checked on fixed layouts (test_compiled_matches_eager): a compile per drawn
shape would make each draw take seconds.

Each leaf tensor is drawn once and the op's input is a view of it, so the reference takes the
same view of the leaf's float64 copy and gradients are compared at the leaves.

On CPU (CI) the ops run their eager reference: the draws check the Python side (argument
handling, views, the table-row and broadcast paths). On a GPU they run the kernels:
    SUITE_FUZZ_EXAMPLES=300 pytest tests/test_ops_layouts.py --hypothesis-seed=SEED \
        --hypothesis-show-statistics
(tools/ or the committed log under reports/reference/ say which seed and how many draws ran).
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suite.ops import AdaLN, FusedLayerNorm, adaln, layer_norm_affine
from suite.ops.epilogue import residual_norm, rms_norm

CUDA = torch.cuda.is_available()
DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")],
    ),
]
EXAMPLES = int(os.environ.get("SUITE_FUZZ_EXAMPLES", "25"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
MAX_D = 8192  # both ops' register-resident row (fused_cuda.MAX_D, epilogue_cuda.MAX_D)
# relative L2 error allowed, by the lowest precision involved (the kernels round once, in fp32)
TOL = {torch.float32: 2e-5, torch.bfloat16: 1.5e-2, torch.float16: 3e-3}
GRAD_TOL = {torch.float32: 1e-4, torch.bfloat16: 1.5e-2, torch.float16: 3e-3}
# residual_norm's backward recomputes the norm from x_new rounded to x's dtype, the float64 chain
# from the exact sum: in bf16 that rounding reaches the gradients (tests/test_epilogue_cpu.py)
EPI_GRAD = 4
FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def rel(a, b, floor: float = 1e-2) -> float:
    """Relative L2 error, against a floor of 1e-2 rms (the inputs and gradients here are O(1)): where the true value is near zero next to
    its inputs' scale (LayerNorm's dx at D = 1 or 2, where the output hardly depends on x), fp32
    arithmetic leaves absolute noise that no implementation avoids; the floor allows tol * 1e-2
    of it per element there (about 10 fp32 ulps of an O(1) value), while a layout bug errs by O(1)."""
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(floor * b.numel() ** 0.5)).item()


def amplification(rows, leaf, eps: float = 1e-6, rms: bool = False) -> float:
    """The largest 1 / std (LayerNorm; 1 / rms for RMSNorm) over the rows a norm divides: the
    factor by which the input gradient's fp32 noise grows where a row is nearly constant (D = 2
    or 3 draws such rows), times the square root of how many rows one element of the leaf feeds
    (an expanded x sums that noise): the floor's scale for the gradients of what enters the norm."""
    r = rows.detach().double()
    var = r.square().mean(-1) if rms else r.var(-1, unbiased=False)
    fan = max(1.0, r.numel() / max(1, leaf.numel())) ** 0.5
    return (var + eps).rsqrt().max().item() * fan if r.numel() else 1.0


def coarsest(*dtypes) -> torch.dtype:
    return max(dtypes, key=lambda d: TOL[d])


# ------------------------------------------------------------------------------ layouts
# name -> (leaf shape from (B, N, D), view of the leaf that is the [B, N, D] x)
X_LAYOUTS = {
    "contiguous": (lambda B, N, D: (B, N, D), lambda t, B, N, D: t),
    "lastdim-strided": (lambda B, N, D: (B, N, 2 * D), lambda t, B, N, D: t[..., ::2]),
    "transposed": (lambda B, N, D: (N, B, D), lambda t, B, N, D: t.transpose(0, 1)),
    "token-major": (lambda B, N, D: (B, D, N), lambda t, B, N, D: t.transpose(1, 2)),
    "sliced": (lambda B, N, D: (B + 1, N + 2, D + 3), lambda t, B, N, D: t[1:, 2:, 3:]),
    "offset-1": (lambda B, N, D: (B * N * D + 1,), lambda t, B, N, D: t[1:].view(B, N, D)),
    "expanded-batch": (lambda B, N, D: (1, N, D), lambda t, B, N, D: t.expand(B, N, D)),
    "expanded-tokens": (lambda B, N, D: (B, 1, D), lambda t, B, N, D: t.expand(B, N, D)),
}

# name -> (leaf shapes, (scale, shift) from the leaves); the [B, K, D] tables are Wan's
MOD_LAYOUTS = {
    "sample-2d": ([(0, 1), (0, 1)], lambda s, h: (s, h)),
    "sample-3d": ([(0, 2), (0, 2)], lambda s, h: (s, h)),
    "broadcast-b": ([(1, 1), (1, 1)], lambda s, h: (s, h)),
    "broadcast-b-3d": ([(1, 2), (1, 2)], lambda s, h: (s, h)),
    "table-rows": ([(0, 6)], lambda e: (e[:, 1:2], e[:, 0:1])),
    "table-chunks": ([(0, 6)], lambda e: e.chunk(6, dim=1)[4:2:-1]),
    "table-squeezed": ([(0, 6)], lambda e: (e[:, 1], e[:, 0])),
    "table-transposed": (
        [(0, 7)],
        lambda e: (e.transpose(1, 2)[:, 1:2], e.transpose(1, 2)[:, 0:1]),
    ),
    "table-wide": (
        [(0, 8)],
        lambda e: (e[:, 1:2, : e.shape[2] // 2], e[:, 0:1, e.shape[2] // 2 :]),
    ),
    "mixed-strides": ([(0, 2), (0, 6)], lambda s, e: (s, e[:, 0:1])),
    "lastdim-strided": ([(0, 9), (0, 9)], lambda s, h: (s[:, ::2], h[:, 1::2])),
    "per-token": ([(0, 3), (0, 3)], lambda s, h: (s, h)),
    "per-token-broadcast": ([(1, 3), (1, 3)], lambda s, h: (s, h)),
    "per-token-table": ([(0, 10)], lambda e: (e[:, :, 1], e[:, :, 0])),
    "per-token-transposed": (
        [(0, 11), (0, 11)],
        lambda s, h: (s.transpose(0, 1), h.transpose(0, 1)),
    ),
}


def _mod_shape(kind: int, b: int, N: int, D: int) -> tuple[int, ...]:
    """Leaf shapes by kind: 1 [b, D], 2 [b, 1, D], 3 [b, N, D], 6 [b, 6, D], 7 [b, D, 6],
    8 [b, 6, 2D], 9 [b, 2D], 10 [b, N, 6, D], 11 [N, b, D]."""
    return {
        1: (b, D),
        2: (b, 1, D),
        3: (b, N, D),
        6: (b, 6, D),
        7: (b, D, 6),
        8: (b, 6, 2 * D),
        9: (b, 2 * D),
        10: (b, N, 6, D),
        11: (N, b, D),
    }[kind]


def _leaf(shape, dtype, device, gen, scale=1.0, offset=0.0) -> torch.Tensor:
    t = torch.randn(shape, generator=gen, dtype=torch.float64) * scale + offset
    return t.to(device=device, dtype=dtype)


def _draw_x(data, B, N, D, dtype, device, gen, label="x"):
    layout = data.draw(st.sampled_from(sorted(X_LAYOUTS)), label=f"{label} layout")
    shape, view = X_LAYOUTS[layout]
    return _leaf(shape(B, N, D), dtype, device, gen, 2.0, 0.5), lambda t: view(t, B, N, D)


def _draw_mods(data, B, N, D, device, gen):
    layout = data.draw(st.sampled_from(sorted(MOD_LAYOUTS)), label="modulation layout")
    dtype = data.draw(st.sampled_from(FLOATS), label="modulation dtype")
    kinds, view = MOD_LAYOUTS[layout]
    leaves = [_leaf(_mod_shape(k, B if b == 0 else 1, N, D), dtype, device, gen, 0.5)
              for b, k in kinds]  # fmt: skip
    return leaves, view, dtype


# widths drawn: 1, odd, tiny, Wan's, the largest supported and one past it. On a GPU each new
# (dtypes, D, operands) is an NVRTC program (1-3 s), so fewer widths there, all prebuilt
# (fuzz_configs) before the draws.
D_CPU = [1, 2, 3, 8, 64, 127, 1000, 1001, 1536, 3072, 5120, MAX_D, MAX_D + 1]
D_CUDA = [1, 3, 8, 127, 1536, 5120, MAX_D, MAX_D + 1]


def _draw_shape(data, device):
    B = data.draw(st.integers(1, 3), label="B")
    D = data.draw(st.sampled_from(D_CUDA if device == "cuda" else D_CPU), label="D")
    Ns = [1, 2, 3, 7, 33, 128, 1000] + ([4096, 8191] if device == "cuda" else [])
    N = data.draw(st.sampled_from(Ns), label="N")
    cap = 8_000_000 if device == "cuda" else 600_000  # elements: float64 reference time
    return B, max(1, min(N, cap // (B * D))), D


def _draw_grad(data):
    """all | x | mod | off (requires_grad False) | no_grad (leaves need grad, torch.no_grad)."""
    return data.draw(st.sampled_from(["all", "x", "mod", "off", "no_grad"]), label="grad")


def _run(fn, grad: str, autocast: bool, device: str):
    ctx = torch.no_grad() if grad == "no_grad" else torch.enable_grad()
    ac = (
        torch.autocast(device, dtype=torch.bfloat16)
        if autocast
        else torch.autocast(device, enabled=False)
    )
    with ctx, ac:
        return fn()


def _refused(err: Exception, D: int, device: str) -> None:
    """The only refusal a legal draw may meet: D past the kernels' register-resident row."""
    assert device == "cuda" and D > MAX_D, f"refused a legal input: {err}"
    assert "D" in str(err), err


def _check_grads(outs, refs, leaves, refs_leaves, needs, tol, device, gen, amp=None):
    """Backpropagate the same random upstream gradient through op and reference; compare each
    leaf that needs a gradient. amp: {leaf index: amplification} for the leaves that enter the
    norm (their floor scales with it)."""
    keep = [k for k, r in enumerate(refs) if r.requires_grad]  # x_new of a modulation-only grad
    assert all(outs[k].requires_grad for k in keep)
    outs, refs = [outs[k] for k in keep], [refs[k] for k in keep]
    # drawn in each output's dtype, so the op sees the same upstream values as the reference
    ups = [torch.randn(o.shape, generator=gen).to(device, o.dtype).double() for o in outs]
    got = torch.autograd.grad([o.double() for o in outs], [leaves[i] for i in needs], ups)
    want = torch.autograd.grad(refs, [refs_leaves[i] for i in needs], ups)
    for i, g, w in zip(needs, got, want):
        assert g.shape == leaves[i].shape and g.dtype == leaves[i].dtype, i
        err = rel(g, w, 1e-2 * max(1.0, (amp or {}).get(i, 1.0)))
        assert err < tol(leaves[i].dtype), (i, leaves[i].dtype, err)


def _ref_leaves(leaves, needs):
    return [t.detach().double().requires_grad_(i in needs) for i, t in enumerate(leaves)]


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
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1), label="seed"))
    B, N, D = _draw_shape(data, device)
    xdt = data.draw(st.sampled_from(FLOATS), label="x dtype")
    out_dtype = data.draw(st.sampled_from([None, torch.float32]), label="out_dtype")
    backward = data.draw(st.sampled_from(["fused", "dtile"]), label="backward")
    grad, autocast = _draw_grad(data), data.draw(st.booleans(), label="autocast")
    eps = data.draw(st.sampled_from([1e-6, 1e-5]), label="eps")
    xleaf, xview = _draw_x(data, B, N, D, xdt, device, gen)
    mleaves, mview, mdt = _draw_mods(data, B, N, D, device, gen)
    leaves = [xleaf, *mleaves]
    needs = {"all": range(len(leaves)), "x": [0], "mod": range(1, len(leaves))}.get(grad, ())
    needs = list(needs) if grad != "no_grad" else []
    for i, t in enumerate(leaves):
        t.requires_grad_(i in needs or grad == "no_grad")

    def call():
        x, (s, h) = xview(xleaf), mview(*mleaves)
        if entry == "AdaLN":
            return AdaLN(D, eps, out_dtype, backward)(x, s, h)
        return adaln(x, s, h, eps, out_dtype=out_dtype, backward=backward)

    try:
        y = _run(call, grad, autocast, device)
    except ValueError as err:
        return _refused(err, D, device)
    assert device == "cpu" or D <= MAX_D, "accepted a D past the kernels' limit"
    rl = _ref_leaves(leaves, needs)
    yr = _adaln_ref(xview(rl[0]), *mview(*rl[1:]), eps)
    assert y.shape == (B, N, D) and y.dtype == (out_dtype or xdt)
    assert rel(y, yr) < TOL[y.dtype], (rel(y, yr), y.dtype)
    if needs:
        _check_grads([y], [yr], leaves, rl, needs, lambda dt: GRAD_TOL[coarsest(dt, xdt, y.dtype)],
                     device, gen, {0: amplification(xview(rl[0]), xleaf, eps)})  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("entry", ["layer_norm_affine", "FusedLayerNorm"])
@FUZZ
@given(data=st.data())
def test_affine_layer_norm_any_layout(device, entry, data):
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1), label="seed"))
    B, N, D = _draw_shape(data, device)
    xdt = data.draw(st.sampled_from(FLOATS), label="x dtype")
    grad, autocast = _draw_grad(data), data.draw(st.booleans(), label="autocast")
    xleaf, xview = _draw_x(data, B, N, D, xdt, device, gen)
    if entry == "FusedLayerNorm":
        m = FusedLayerNorm(D).to(device)
        with torch.no_grad():
            m.weight.copy_(_leaf((D,), torch.float32, device, gen, 0.5, 1.0))
            m.bias.copy_(_leaf((D,), torch.float32, device, gen))
        leaves, wview = [xleaf, m.weight, m.bias], None
    else:
        wdt = data.draw(st.sampled_from(FLOATS), label="weight dtype")
        wl = data.draw(st.sampled_from(["contiguous", "strided", "rows-of-one"]), label="w layout")
        if wl == "rows-of-one":
            leaves, wview = (
                [xleaf, _leaf((2, D), wdt, device, gen, 0.5, 1.0)],
                lambda t: (t[0], t[1]),
            )
        else:
            k = 2 if wl == "strided" else 1
            leaves = [xleaf, _leaf((k * D,), wdt, device, gen, 0.5, 1.0),
                      _leaf((k * D,), wdt, device, gen)]  # fmt: skip
            wview = lambda w, b: (w[::k], b[::k])  # noqa: E731
    needs = {"all": range(len(leaves)), "x": [0], "mod": range(1, len(leaves))}.get(grad, ())
    needs = list(needs) if grad != "no_grad" else []
    for i, t in enumerate(leaves):
        t.requires_grad_(i in needs or grad == "no_grad")

    def call():
        x = xview(xleaf)
        return m(x) if wview is None else layer_norm_affine(x, *wview(*leaves[1:]))

    try:
        y = _run(call, grad, autocast, device)
    except ValueError as err:
        return _refused(err, D, device)
    rl = _ref_leaves(leaves, needs)
    w, b = (rl[1], rl[2]) if wview is None else wview(*rl[1:])
    yr = F.layer_norm(xview(rl[0]), (D,), w, b, 1e-6)
    assert y.shape == (B, N, D) and y.dtype == xdt
    assert rel(y, yr) < TOL[xdt], rel(y, yr)
    if needs:
        _check_grads([y], [yr], leaves, rl, needs, lambda dt: GRAD_TOL[coarsest(dt, xdt)],
                     device, gen, {0: amplification(xview(rl[0]), xleaf)})  # fmt: skip


# ------------------------------------------------------------------------------ epilogues
GATES = {  # name -> (leaf kind, view); kinds as _mod_shape's
    "none": None,
    "sample-2d": (1, lambda g: g),
    "sample-3d": (2, lambda g: g),
    "broadcast-b": (-2, lambda g: g),
    "table-row": (6, lambda e: e[:, 2:3]),
    "table-transposed": (7, lambda e: e.transpose(1, 2)[:, 2:3]),
    "per-token": (3, lambda g: g),
    "per-token-transposed": (11, lambda g: g.transpose(0, 1)),
}


@pytest.mark.parametrize("device", DEVICES)
@FUZZ
@given(data=st.data())
def test_residual_norm_any_layout(device, data):
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1), label="seed"))
    B, N, D = _draw_shape(data, device)
    xdt = data.draw(st.sampled_from([torch.float32, torch.bfloat16]), label="x dtype")
    out_dtype = data.draw(st.sampled_from([None, torch.float32]), label="out_dtype")
    grad, autocast = _draw_grad(data), data.draw(st.booleans(), label="autocast")
    xleaf, xview = _draw_x(data, B, N, D, xdt, device, gen)
    yleaf, yview = _draw_x(data, B, N, D, xdt, device, gen, label="y")
    leaves, views = [xleaf, yleaf], {}
    gname = data.draw(st.sampled_from(sorted(GATES)), label="gate layout")
    if GATES[gname] is not None:
        kind, view = GATES[gname]
        gdt = data.draw(st.sampled_from(FLOATS), label="gate dtype")
        leaves.append(
            _leaf(_mod_shape(abs(kind), 1 if kind < 0 else B, N, D), gdt, device, gen, 0.5)
        )
        views["gate"] = (len(leaves) - 1, view)
    if data.draw(st.booleans(), label="modulated"):
        mleaves, mview, _ = _draw_mods(data, B, N, D, device, gen)
        first = len(leaves)
        leaves += mleaves
        views["mod"] = (first, len(leaves), mview)
    if data.draw(st.booleans(), label="affine"):
        wdt = data.draw(st.sampled_from(FLOATS), label="weight dtype")
        leaves += [_leaf((D,), wdt, device, gen, 0.5, 1.0), _leaf((2 * D,), wdt, device, gen)]
        views["affine"] = len(leaves) - 2
    needs = {"all": range(len(leaves)), "x": [0], "mod": range(2, len(leaves))}.get(grad, ())
    needs = list(needs) if grad != "no_grad" else []
    for i, t in enumerate(leaves):
        t.requires_grad_(i in needs or grad == "no_grad")

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
        x_new, normed = _run(call, grad, autocast, device)
    except ValueError as err:
        return _refused(err, D, device)
    rl = _ref_leaves(leaves, needs)
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
        a = max(amplification(xs, xleaf), amplification(xs, yleaf))
        _check_grads([x_new, normed], [xn, nr], leaves, rl, needs,
                     lambda dt: EPI_GRAD * GRAD_TOL[coarsest(dt, xdt)], device, gen,
                     {0: a, 1: a})  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@FUZZ
@given(data=st.data())
def test_rms_norm_any_layout(device, data):
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1), label="seed"))
    B, N, D = _draw_shape(data, device)
    xdt = data.draw(st.sampled_from([torch.float32, torch.bfloat16]), label="x dtype")
    grad, autocast = _draw_grad(data), data.draw(st.booleans(), label="autocast")
    xleaf, xview = _draw_x(data, B, N, D, xdt, device, gen)
    wdt = data.draw(st.sampled_from(FLOATS), label="weight dtype")
    k = data.draw(st.sampled_from([1, 2]), label="weight stride")
    leaves = [xleaf, _leaf((k * D,), wdt, device, gen, 0.5, 1.0)]
    needs = {"all": [0, 1], "x": [0], "mod": [1]}.get(grad, [])
    for i, t in enumerate(leaves):
        t.requires_grad_(i in needs or grad == "no_grad")
    try:
        y = _run(lambda: rms_norm(xview(xleaf), leaves[1][::k]), grad, autocast, device)
    except ValueError as err:
        return _refused(err, D, device)
    rl = _ref_leaves(leaves, needs)
    xr = xview(rl[0])
    yr = xr * torch.rsqrt(xr.square().mean(-1, keepdim=True) + 1e-6) * rl[1][::k]
    assert y.shape == (B, N, D) and y.dtype == xdt
    assert rel(y, yr) < TOL[xdt], rel(y, yr)
    if needs:
        _check_grads([y], [yr], leaves, rl, needs, lambda dt: GRAD_TOL[coarsest(dt, xdt)],
                     device, gen, {0: amplification(xr, xleaf, rms=True)})  # fmt: skip


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

    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1), label="seed"))
    epilogues = data.draw(st.booleans(), label="epilogues")
    B = data.draw(st.integers(1, 2), label="B")
    f, h, w = (data.draw(st.integers(1, 3), label=k) for k in "fhw")
    ref = build_wan("tiny", layers=1, dtype=torch.float32, device=device)
    new = patch_wan(copy.deepcopy(ref), epilogues=epilogues)
    latents = torch.randn(B, ref.config.in_channels, f, 2 * h, 2 * w, generator=gen)  # patch 1x2x2
    rope = ref.rope(latents.to(device))
    N, D = f * h * w, ref.config.num_attention_heads * ref.config.attention_head_dim
    xleaf, xview = _draw_x(data, B, N, D, torch.float32, device, gen)
    per_token = data.draw(st.booleans(), label="per-token temb")
    temb = _leaf((B, N, 6, D) if per_token else (B, 6, D), torch.float32, device, gen, 0.3)
    text = _leaf((B, 5, D), torch.float32, device, gen)
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
        xleaf = _leaf(shape(B, N, D), dtype, device, gen, 2.0, 0.5).requires_grad_()
        kinds, mview = MOD_LAYOUTS[ml]
        mleaves = [_leaf(_mod_shape(k, B, N, D), dtype, device, gen, 0.5).requires_grad_()
                   for _, k in kinds]  # fmt: skip
        y = adaln(view(xleaf, B, N, D), *mview(*mleaves))
        rl = _ref_leaves([xleaf, *mleaves], range(1 + len(mleaves)))
        yr = _adaln_ref(view(rl[0], B, N, D), *mview(*rl[1:]), 1e-6)
        assert rel(y, yr) < TOL[dtype], (xl, ml, rel(y, yr))
        _check_grads([y], [yr], [xleaf, *mleaves], rl, list(range(1 + len(mleaves))),
                     lambda dt: GRAD_TOL[dt], device, gen)  # fmt: skip
        with torch.no_grad():  # the no-grad fast path keeps its own specs
            assert rel(adaln(view(xleaf, B, N, D), *mview(*mleaves)), yr) < TOL[dtype], (xl, ml)


def test_reported_case_wan_table_with_strided_x():
    """The case that once came back wrong on CUDA: bf16 x [2, 1000, 1536] with a strided last
    dimension, scale/shift rows of one [B, 6, D] table (Wan's e[:, 1:2], e[:, 0:1])."""
    device = "cuda" if CUDA else "cpu"
    gen = torch.Generator().manual_seed(3)
    xleaf = _leaf((2, 1000, 2 * 1536), torch.bfloat16, device, gen, 2.0).requires_grad_()
    e = _leaf((2, 6, 1536), torch.bfloat16, device, gen, 0.5).requires_grad_()
    for backward in ("fused", "dtile"):
        y = adaln(xleaf[..., ::2], e[:, 1:2], e[:, 0:1], backward=backward)
        rl = _ref_leaves([xleaf, e], [0, 1])
        yr = _adaln_ref(rl[0][..., ::2], rl[1][:, 1:2], rl[1][:, 0:1], 1e-6)
        assert rel(y, yr) < TOL[torch.bfloat16]
        _check_grads([y], [yr], [xleaf, e], rl, [0, 1], lambda dt: GRAD_TOL[dt], device, gen)


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
    xleaf = _leaf(shape(B, N, D), torch.float32, device, gen).requires_grad_()
    mleaves = [_leaf(_mod_shape(k, B, N, D), torch.float32, device, gen, 0.5).requires_grad_()
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


def fuzz_configs():
    """(AdaLN KernelConfigs, EpilogueConfigs) every GPU draw of this module can reach (and the
    patched tiny block's D = 32): the device script prebuilds them in parallel."""
    from suite.ops.epilogue_cuda import (
        BIAS,
        GATE,
        GATE_TOK,
        MOD,
        MOD_TOK,
        RESID,
        RMS,
        WEIGHT,
        EpilogueConfig,
    )
    from suite.ops.epilogue_cuda import CTYPE as ECT
    from suite.ops.fused_cuda import CTYPE, KernelConfig
    from suite.ops.reference import MODE_AFFINE, MODE_SAMPLE, MODE_TOKEN

    widths = [d for d in D_CUDA if d <= MAX_D] + [32]
    ct = [CTYPE[d] for d in FLOATS]
    adaln_cfgs = [KernelConfig(tx, tm, ty, D, mode) for tx in ct for tm in ct for ty in {tx, "float"}
                  for D in widths for mode in (MODE_SAMPLE, MODE_TOKEN, MODE_AFFINE)]  # fmt: skip
    gates, mods = (0, GATE, GATE | GATE_TOK), (0, MOD, MOD | MOD_TOK)
    flags = [RESID | g | m | a for g in gates for m in mods for a in (0, WEIGHT | BIAS)]
    epi = []
    for tx in ("float", "bf16"):
        for D in widths:
            vectors = (False, True) if D % (16 // (4 if tx == "float" else 2)) == 0 else (False,)
            for v in vectors:
                epi.append(EpilogueConfig(tx, tx, D, RMS | WEIGHT, v))
                epi += [EpilogueConfig(tx, to, D, f, v) for to in {tx, ECT[torch.float32]}
                        for f in flags]  # fmt: skip
    return adaln_cfgs, epi
