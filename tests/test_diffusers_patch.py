"""suite.ops.diffusers.patch_wan: a patched diffusers WanTransformer3DModel matches the unpatched
one (outputs, parameter and input gradients), traces without graph breaks, refuses what it does
not mirror. On CPU the fused ops run their eager reference (suite/ops/fused_adaln/reference.py: fp32
arithmetic, one rounding), so fp32 agreement is to fp32 rounding of a different LN formula."""

from __future__ import annotations

import sys
import types

import pytest
import torch
import torch.nn.functional as F

from suite.model.wan import build_wan, step_inputs
from suite.ops import diffusers as dpatch
from suite.ops.diffusers import patch_wan

# (rtol, atol) per dtype: fp32 differs only by LN formula rounding; bf16 by one-ulp flips of
# bf16-rounded activations that the next GEMM spreads
TOL = {torch.float32: (1e-4, 1e-5), torch.bfloat16: (5e-2, 5e-2)}
SHAPE = dict(batch=2, frames=5, height=32, width=32)  # 2 latent frames x 2 x 2 = 8 tokens


def _pair(name="tiny", layers=None, dtype=torch.float32, device="cpu", ckpt=True, **flags):
    ref = build_wan(name, layers=layers, dtype=dtype, device=device, checkpointing=ckpt)
    new = build_wan(name, layers=layers, dtype=dtype, device=device, checkpointing=ckpt)
    return ref, patch_wan(new, **flags)


def _fwd_bwd(model, inputs):
    x = inputs["hidden_states"].clone().requires_grad_(True)
    c = inputs["encoder_hidden_states"].clone().requires_grad_(True)
    out = model(x, inputs["timestep"], c, return_dict=False)[0]
    F.mse_loss(out.float(), inputs["target"].float()).backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    return out.detach(), grads | {"<x>": x.grad, "<text>": c.grad}


def _assert_match(ref, new, inputs, dtype):
    rtol, atol = TOL[dtype]
    out_r, g_r = _fwd_bwd(ref, inputs)
    out_n, g_n = _fwd_bwd(new, inputs)
    torch.testing.assert_close(out_n, out_r, rtol=rtol, atol=atol)
    assert g_r.keys() == g_n.keys()
    for k in g_r:
        assert g_n[k] is not None, k
        # A gradient's tolerance is relative to its own size, except a key bias's: softmax is
        # invariant to adding q.b to every logit of a query, so its true gradient is exactly 0 and
        # both runs hold rounding noise only (seen in bf16 on the H200); it is held to the scale
        # of its weight's gradient instead.
        own = k.removesuffix("to_k.bias") + "to_k.weight" if k.endswith("to_k.bias") else k
        scale = g_r[own].abs().max().clamp_min(1e-30)
        torch.testing.assert_close(g_n[k], g_r[k], rtol=rtol, atol=atol * scale, msg=k)


@pytest.mark.parametrize("ckpt", [True, False])
def test_adaln_patch_matches_diffusers_cpu_fp32(ckpt):
    ref, new = _pair(ckpt=ckpt)
    _assert_match(ref, new, step_inputs(ref, **SHAPE), torch.float32)


def test_adaln_patch_matches_diffusers_cpu_bf16():
    ref, new = _pair(dtype=torch.bfloat16)
    assert new.blocks[0].scale_shift_table.dtype == torch.float32  # kept fp32, as diffusers does
    _assert_match(ref, new, step_inputs(ref, **SHAPE), torch.bfloat16)


def test_patch_really_calls_the_fused_op(monkeypatch):
    calls = []
    real = dpatch.adaln
    monkeypatch.setattr(dpatch, "adaln", lambda *a, **k: calls.append(1) or real(*a, **k))
    ref, new = _pair(layers=3)
    _fwd_bwd(new, step_inputs(ref, **SHAPE))
    assert len(calls) == 2 * 3 * 2 + 1  # norm1, norm3 per block, run and checkpoint recompute; head


def test_patch_keeps_parameters_and_state_dict():
    ref, new = _pair(epilogues=False)
    assert ref.state_dict().keys() == new.state_dict().keys()
    for (n, a), b in zip(ref.state_dict().items(), new.state_dict().values(), strict=True):
        assert torch.equal(a, b) and a.dtype == b.dtype, n


def _standin_epilogue() -> types.ModuleType:
    """An eager module with suite.ops.epilogue's documented API and semantics, to check the
    patch's wiring of the epilogues on CPU without the real module."""
    mod = types.ModuleType("suite.ops.epilogue")

    def residual_norm(x, y, gate=None, *, scale=None, shift=None, weight=None, bias=None,
                      eps=1e-6, out_dtype=None):  # fmt: skip
        x_new = (x.float() + y.float() * (1 if gate is None else gate)).to(x.dtype)
        n = F.layer_norm(x_new.float(), x.shape[-1:], eps=eps)
        if weight is not None:
            n = n * weight.float() + bias.float()
        if scale is not None:
            n = n * (1 + scale.float()) + shift.float()
        mod.calls.append("residual_norm")
        return x_new, n.to(out_dtype or x.dtype)

    def rms_norm(x, weight, eps=1e-6):
        mod.calls.append("rms_norm")
        return F.rms_norm(x, x.shape[-1:], weight, eps)

    mod.residual_norm, mod.rms_norm, mod.calls = residual_norm, rms_norm, []
    return mod


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_epilogue_wiring_with_standin(monkeypatch, dtype):
    mod = _standin_epilogue()
    monkeypatch.setitem(sys.modules, "suite.ops.epilogue", mod)
    monkeypatch.setattr(dpatch, "_epi", None)
    ref, new = _pair(dtype=dtype, ckpt=False, epilogues=True)
    assert isinstance(new.blocks[0].attn1.norm_q, dpatch.EpilogueRMSNorm)
    assert new.blocks[0].attn1.norm_q.weight is new.blocks[0].attn1.norm_q.weight
    _assert_match(ref, new, step_inputs(ref, **SHAPE), dtype)
    # per block: 2 residual_norm, 4 rms_norm (q, k of attn1 and attn2)
    assert mod.calls.count("residual_norm") == 2 * 2 and mod.calls.count("rms_norm") == 4 * 2


def test_epilogues_real_module_cpu():
    pytest.importorskip("suite.ops.epilogue")
    ref, new = _pair(epilogues=True)
    _assert_match(ref, new, step_inputs(ref, **SHAPE), torch.float32)


def test_patched_block_traces_whole_without_recompiles():
    """Dynamo only (backend="eager", fast on CPU): fullgraph fails on any graph break, and the
    second block reusing the first block's graph shows the per-instance forward adds no guard
    that differs between blocks."""
    import torch._dynamo as dynamo

    ref, new = _pair(layers=3, ckpt=True)
    inputs = step_inputs(ref, **SHAPE)
    dynamo.reset()
    new.compile_repeated_blocks(backend="eager", fullgraph=True)
    with dynamo.config.patch(error_on_recompile=True):
        _assert_match(ref, new, inputs, torch.float32)
    dynamo.reset()


def test_refuses_unknown_structure():
    model = build_wan("tiny")
    model.blocks[1].norm1 = torch.nn.LayerNorm(32, elementwise_affine=False)
    with pytest.raises(ValueError, match=r"blocks\[1\]\.norm1 must be FP32LayerNorm"):
        patch_wan(model)
    with pytest.raises(ValueError, match="must be a diffusers WanTransformer3DModel"):
        patch_wan(torch.nn.Linear(2, 2))


def test_refuses_twice_and_nothing():
    model = patch_wan(build_wan("tiny"))
    assert dpatch.is_patched(model) == {"adaln": True, "epilogues": False}
    with pytest.raises(ValueError, match="patched already"):
        patch_wan(model)
    with pytest.raises(ValueError, match="would change nothing"):
        patch_wan(build_wan("tiny"), adaln=False)


def test_refuses_other_diffusers_source(monkeypatch):
    monkeypatch.setitem(dpatch.MIRRORED, "WanTransformerBlock.forward", "0" * 16)
    with pytest.raises(RuntimeError, match="WanTransformerBlock.forward of diffusers"):
        patch_wan(build_wan("tiny"))


def test_epilogues_missing_module_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(dpatch, "EPILOGUE_MODULE", "suite.ops.no_such_epilogue")
    monkeypatch.setattr(dpatch, "_epi", None)
    with pytest.raises(ImportError, match="needs suite.ops.no_such_epilogue"):
        patch_wan(build_wan("tiny"), epilogues=True)


# ---------------------------------------------------------------------------------- GPU
@pytest.mark.parametrize("epilogues", [False, True])
@pytest.mark.parametrize("name", ["tiny", "wan-1.3b"])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_patch_matches_diffusers_gpu_bf16(name, epilogues):
    if epilogues:
        pytest.importorskip("suite.ops.epilogue")
    layers = 2 if name != "tiny" else None
    ref, new = _pair(name, layers, torch.bfloat16, "cuda", epilogues=epilogues)
    inputs = step_inputs(ref, batch=2, frames=5, height=64, width=64, device="cuda")  # 32 tokens
    _assert_match(ref, new, inputs, torch.bfloat16)


@pytest.mark.parametrize("epilogues", [False, True])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_regional_compile_gpu_no_graph_breaks(epilogues):
    """Inductor on each block, fullgraph (a graph break fails), no recompile across blocks;
    the compiled patched model matches the eager unpatched one; explain() counts 0 breaks."""
    import torch._dynamo as dynamo

    if epilogues:
        pytest.importorskip("suite.ops.epilogue")
    ref, new = _pair("wan-1.3b", 3, torch.bfloat16, "cuda", epilogues=epilogues)
    inputs = step_inputs(ref, batch=1, frames=5, height=64, width=64, device="cuda")
    b = new.blocks[0]
    args = (
        torch.randn(1, 32, 1536, device="cuda", dtype=torch.bfloat16),
        torch.randn(1, 512, 1536, device="cuda", dtype=torch.bfloat16),
        torch.randn(1, 6, 1536, device="cuda"),
        new.rope(inputs["hidden_states"]),
    )
    dynamo.reset()
    ex = dynamo.explain(b)(*args)
    assert ex.graph_break_count == 0, ex.break_reasons
    dynamo.reset()
    new.compile_repeated_blocks(fullgraph=True)
    with dynamo.config.patch(error_on_recompile=True):
        _assert_match(ref, new, inputs, torch.bfloat16)
    dynamo.reset()
