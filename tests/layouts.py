"""The layout property tests' shared part (tests/test_ops_layouts.py, test_epilogue_layouts.py):
the layouts a tensor can arrive in, as leaf shapes and views; the draws; the float64 comparison
with its tolerances; and the NVRTC configurations a GPU run can reach (fuzz_configs).

Each leaf tensor is drawn once and an op's input is a view of it, so the reference takes the
same view of the leaf's float64 copy and gradients are compared at the leaves.
"""

from __future__ import annotations

import math
import os

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

CUDA = torch.cuda.is_available()
DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")],
    ),
]


def gpu_only(test):
    """A test of the CUDA kernels or host path alone (DEVICES' cuda marks, without a device)."""
    return pytest.mark.gpu(pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")(test))


EXAMPLES = int(os.environ.get("SUITE_FUZZ_EXAMPLES", "25"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
MAX_D = 8192  # both ops' register-resident row (OpKernels.max_d of suite/cuda/build.py)
# relative L2 error allowed, by the lowest precision involved (the kernels round once, in fp32)
TOL = {torch.float32: 2e-5, torch.bfloat16: 1.5e-2, torch.float16: 3e-3}
GRAD_TOL = {torch.float32: 1e-4, torch.bfloat16: 1.5e-2, torch.float16: 3e-3}
# residual_norm's backward recomputes the norm from x_new rounded to x's dtype, the float64 chain
# from the exact sum: in bf16 that rounding reaches the gradients (tests/test_epilogue.py)
EPI_GRAD = 4
FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def rel(a, b, floor: float = 1e-2) -> float:
    """Relative L2 error, against a floor of 1e-2 rms (the inputs and gradients here are O(1)): where the true value is near zero next to
    its inputs' scale (LayerNorm's dx at D = 1 or 2, where the output hardly depends on x), fp32
    arithmetic leaves absolute noise that no implementation avoids; the floor allows tol * 1e-2
    of it per element there (about 10 fp32 ulps of an O(1) value), while a layout bug errs by O(1)."""
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(floor * b.numel() ** 0.5)).item()


def amplification(rows, leaf, eps: float = 1e-6, rms: bool = False, gains=()) -> float:
    """The largest 1 / std (LayerNorm; 1 / rms for RMSNorm) over the rows a norm divides: the
    factor by which the input gradient's fp32 noise grows where a row is nearly constant (D = 2
    or 3 draws such rows), times the square root of how many rows one element of the leaf feeds
    (an expanded x sums that noise): the floor's scale for the gradients of what enters the norm.
    gains: what multiplies the upstream gradient before the norm's backward (an affine weight,
    AdaLN's 1 + scale; None for an absent one); their largest magnitudes scale that noise too (a D = 2 LayerNorm with a
    weight of 2.1 erred 1.09e-4 against the 1e-4 an ungained floor allowed)."""
    r = rows.detach().double()
    var = r.square().mean(-1) if rms else r.var(-1, unbiased=False)
    fan = max(1.0, r.numel() / max(1, leaf.numel())) ** 0.5
    g = math.prod(max(1.0, float(t.detach().abs().max())) for t in gains if t is not None)
    return (var + eps).rsqrt().max().item() * fan * g if r.numel() else 1.0


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


def mod_shape(kind: int, b: int, N: int, D: int) -> tuple[int, ...]:
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


def leaf(shape, dtype, device, gen, scale=1.0, offset=0.0) -> torch.Tensor:
    t = torch.randn(shape, generator=gen, dtype=torch.float64) * scale + offset
    return t.to(device=device, dtype=dtype)


def draw_x(data, B, N, D, dtype, device, gen, label="x"):
    layout = data.draw(st.sampled_from(sorted(X_LAYOUTS)), label=f"{label} layout")
    shape, view = X_LAYOUTS[layout]
    return leaf(shape(B, N, D), dtype, device, gen, 2.0, 0.5), lambda t: view(t, B, N, D)


def draw_mods(data, B, N, D, device, gen):
    layout = data.draw(st.sampled_from(sorted(MOD_LAYOUTS)), label="modulation layout")
    dtype = data.draw(st.sampled_from(FLOATS), label="modulation dtype")
    kinds, view = MOD_LAYOUTS[layout]
    leaves = [leaf(mod_shape(k, B if b == 0 else 1, N, D), dtype, device, gen, 0.5)
              for b, k in kinds]  # fmt: skip
    return leaves, view, dtype


# widths drawn: 1, odd, tiny, Wan's, the largest supported and one past it. On a GPU each new
# (dtypes, D, operands) is an NVRTC program (1-3 s), so fewer widths there, all prebuilt
# (fuzz_configs) before the draws.
D_CPU = [1, 2, 3, 8, 64, 127, 1000, 1001, 1536, 3072, 5120, MAX_D, MAX_D + 1]
D_CUDA = [1, 3, 8, 127, 1536, 5120, MAX_D, MAX_D + 1]


def draw_shape(data, device):
    B = data.draw(st.integers(1, 3), label="B")
    D = data.draw(st.sampled_from(D_CUDA if device == "cuda" else D_CPU), label="D")
    Ns = [1, 2, 3, 7, 33, 128, 1000] + ([4096, 8191] if device == "cuda" else [])
    N = data.draw(st.sampled_from(Ns), label="N")
    cap = 8_000_000 if device == "cuda" else 600_000  # elements: float64 reference time
    return B, max(1, min(N, cap // (B * D))), D


def draw_generator(data) -> torch.Generator:
    """The draw's own CPU generator: every tensor of a draw comes from it (reproducible)."""
    return torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1), label="seed"))


def mark_grads(leaves, grad: str, operands_from: int) -> list[int]:
    """Mark the leaves' requires_grad for a drawn `grad` and return the indices whose gradients
    are compared: all, x (leaf 0) only, the operands (from `operands_from` on) only, none (off);
    under no_grad every leaf requires grad and none is compared."""
    needs = {"all": range(len(leaves)), "x": [0], "mod": range(operands_from, len(leaves))}
    needs = [] if grad == "no_grad" else list(needs.get(grad, ()))
    for i, t in enumerate(leaves):
        t.requires_grad_(i in needs or grad == "no_grad")
    return needs


def draw_grad(data):
    """all | x | mod | off (requires_grad False) | no_grad (leaves need grad, torch.no_grad)."""
    return data.draw(st.sampled_from(["all", "x", "mod", "off", "no_grad"]), label="grad")


def run(fn, grad: str, autocast: bool, device: str):
    ctx = torch.no_grad() if grad == "no_grad" else torch.enable_grad()
    ac = (
        torch.autocast(device, dtype=torch.bfloat16)
        if autocast
        else torch.autocast(device, enabled=False)
    )
    with ctx, ac:
        return fn()


def refused(err: Exception, D: int, device: str) -> None:
    """The only refusal a legal draw may meet: D past the kernels' register-resident row."""
    assert device == "cuda" and D > MAX_D, f"refused a legal input: {err}"
    assert "D" in str(err), err


def check_grads(outs, refs, leaves, refs_leaves, needs, tol, device, gen, amp=None):
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
        # a leaf smaller than the output (weight, bias, a per-sample row) sums k output elements
        # per element: its rounding noise grows as sqrt(k), so its floor does too (a bias
        # gradient of 33 rows that cancels to ~1e-4 errs by ~1e-6 in fp32)
        k = max(1.0, max(o.numel() for o in outs) / max(1, leaves[i].numel()))
        err = rel(g, w, 1e-2 * max(1.0, (amp or {}).get(i, 1.0), k**0.5))
        assert err < tol(leaves[i].dtype), (i, leaves[i].dtype, err)


def ref_leaves(leaves, needs):
    return [t.detach().double().requires_grad_(i in needs) for i, t in enumerate(leaves)]


GATES = {  # name -> (leaf kind, view); kinds as mod_shape's
    "none": None,
    "sample-2d": (1, lambda g: g),
    "sample-3d": (2, lambda g: g),
    "broadcast-b": (-2, lambda g: g),
    "table-row": (6, lambda e: e[:, 2:3]),
    "table-transposed": (7, lambda e: e.transpose(1, 2)[:, 2:3]),
    "per-token": (3, lambda g: g),
    "per-token-transposed": (11, lambda g: g.transpose(0, 1)),
}


def fuzz_configs():
    """(AdaLN KernelConfigs, EpilogueConfigs) every GPU draw of this module can reach (and the
    patched tiny block's D = 32): the device script prebuilds them in parallel."""
    from suite.ops.epilogue.cuda import (
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
    from suite.ops.epilogue.cuda import CTYPE as ECT
    from suite.ops.fused_adaln.cuda import CTYPE, KernelConfig
    from suite.ops.fused_adaln.reference import MODE_AFFINE, MODE_SAMPLE, MODE_TOKEN

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
