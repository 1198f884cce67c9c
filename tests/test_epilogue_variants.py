"""GPU tests of the fused epilogues' kernel variants the launch table selects
(suite.ops.epilogue.cuda.VARIANTS; lab/tests checks the lab's other candidates with the same
`check_variant`): each one's forward and backward against the rule's kernels on the same inputs,
bitwise where the variant keeps the arithmetic (`same_bits`: only loads, occupancy or where an
operand row lives change), within bf16 rounding otherwise. Several rows per CTA and two samples,
so the prefetch across rows, the per-sample operand rows and the partial column sums are all
exercised. A variant must pass here to ship as one line of cuda.SHIPPED."""

from __future__ import annotations

import pytest
import torch

from suite.ops.epilogue import cuda as ec
from tests.layouts import gpu_only

F = ec.WAN_FLAGS
# Every variant on the lab's two ops at Wan's widths (prebuilt on the GPU machine); the variants
# that park operand rows in shared memory also on the other operand sets (affine weight and bias
# rows, per-token modulation, scalar loads: no prefetch) at one width each.
LAB = [(F["gate+mod"], D) for D in (1536, 3072, 5120)] + [(F["rms"], D) for D in (1536, 3072, 5120)]
OTHER = [(F["affine"], 1536), (F["tok"], 1536), (F["plain+mod"], 1001)]


def params(variants: dict[str, ec.Variant]) -> list[tuple[str, int, int]]:
    """(name, flags, D) of every case the variants `variants` are checked on."""
    parked = [n for n, v in variants.items() if "EP_BWD_SMEM=1" in v.defines]
    return [(n, f, D) for n in variants for f, D in LAB] + [(n, *c) for n in parked for c in OTHER]


def _operands(flags: int, B: int, N: int, D: int):
    g = torch.Generator(device="cuda").manual_seed(D + flags)

    def r(*shape, s=1.0, dt=torch.float32):
        return (s * torch.randn(*shape, generator=g, device="cuda")).to(dt)

    tok = N if flags & ec.MOD_TOK else 1
    return dict(
        x=r(B, N, D, dt=torch.bfloat16),
        y=r(B, N, D, dt=torch.bfloat16) if flags & ec.RESID else None,
        gate=r(B, N if flags & ec.GATE_TOK else 1, D, s=0.5) if flags & ec.GATE else None,
        scale=r(B, tok, D, s=0.3) if flags & ec.MOD else None,
        shift=r(B, tok, D, s=0.3) if flags & ec.MOD else None,
        weight=r(D, s=0.5) + 1 if flags & ec.WEIGHT else None,
        bias=r(D, s=0.5) if flags & ec.BIAS else None,
    )


def _run(flags: int, a: dict, tune):
    """Every output of one forward and one backward (fixed upstream gradients) with `tune`."""
    fwd = ec.forward(a["x"], a["y"], a["gate"], a["scale"], a["shift"], a["weight"], a["bias"],
                     1e-6, torch.bfloat16, flags, tune=tune)  # fmt: skip
    x_new, normed, mean, rstd = fwd
    xs = x_new if flags & ec.RESID else a["x"]
    g = torch.Generator(device="cuda").manual_seed(1)
    d_out = torch.randn(normed.shape, generator=g, device="cuda").to(normed.dtype)
    d_xnew = torch.randn(xs.shape, generator=g, device="cuda").to(xs.dtype)
    bwd = ec.backward(d_xnew if flags & ec.RESID else None, d_out, xs, a["y"], a["gate"],
                      a["scale"], a["weight"], a["bias"], mean, rstd, flags, tune=tune)  # fmt: skip
    return [t for t in (*fwd, *bwd) if t.numel()]


def check_variant(name: str, variant: ec.Variant, flags: int, D: int) -> None:
    """Every output of `variant` against the rule's kernels on one operand set: bitwise where it
    keeps the arithmetic, else within 1% relative norm; all finite."""
    a = _operands(flags, 2, 300, D)  # 300 rows: several per CTA at every width
    want = _run(flags, a, lambda c, p: c)
    got = _run(flags, a, lambda c, p: variant.apply(c))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert torch.isfinite(g).all(), (name, i)
        if variant.same_bits:
            assert torch.equal(g, w), (name, i, (g.float() - w.float()).abs().max().item())
        else:
            err = ((g.double() - w.double()).norm() / w.double().norm().clamp_min(1e-30)).item()
            assert err < 1e-2, (name, i, err)


@gpu_only
@pytest.mark.parametrize("name,flags,D", params(ec.VARIANTS))
def test_variant_matches_the_rule_kernels(name, flags, D):
    check_variant(name, ec.VARIANTS[name], flags, D)
