"""suite.model.wan: diffusers' WanTransformer3DModel from the Wan 2.1 configs, cast as diffusers'
loading casts, the one batch builder and the flow-matching loss (CPU, tiny config; the big configs
on the meta device)."""

from __future__ import annotations

import types

import pytest
import torch

from suite.data.geometry import tokens
from suite.model.wan import (
    Batch,
    build_wan,
    describe,
    flow_matching_loss,
    get_wan_config,
    latent_shape,
    make_batch,
    step_inputs,
)
from suite.train.step import forward_backward


def test_wan21_configs():
    small, big = get_wan_config("wan-1.3b"), get_wan_config("wan-14b")
    assert (small.dim, small.num_attention_heads, small.ffn_dim, small.num_layers) == (
        1536, 12, 8960, 30,
    )  # fmt: skip
    assert (big.dim, big.num_attention_heads, big.ffn_dim, big.num_layers) == (5120, 40, 13824, 40)
    for c in (small, big):
        assert (c.text_dim, c.freq_dim, c.in_channels, c.patch_size) == (4096, 256, 16, (1, 2, 2))
        assert c.eps == 1e-6 and c.cross_attn_norm and c.qk_norm == "rms_norm_across_heads"
    assert get_wan_config("wan-1.3b", layers=4).num_layers == 4


def test_wan_1_3b_parameter_count_on_meta():
    m = build_wan("wan-1.3b", device="meta")
    n = sum(p.numel() for p in m.parameters())
    assert 1.3e9 < n < 1.5e9  # Wan 2.1 T2V 1.3B: 1.42e9 with the text and time embedders
    assert len(m.blocks) == 30 and m.blocks[0].ffn.net[2].in_features == 8960


@pytest.mark.parametrize(
    "frames,height,width,S", [(81, 480, 832, 32760), (81, 720, 1280, 75600), (1, 480, 832, 1560)]
)
def test_latents_give_the_token_count(frames, height, width, S):
    shape = latent_shape(frames, height, width)
    assert shape[0] == 16 and shape[1] * (shape[2] // 2) * (shape[3] // 2) == S
    assert tokens(height, width, frames) == S


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="name must be one of"):
        get_wan_config("wan-7b")
    with pytest.raises(ValueError, match="layers must be a positive integer"):
        get_wan_config("tiny", layers=0)
    with pytest.raises(ValueError, match="frames must be 1 \\+ 4k"):
        latent_shape(80, 480, 832)
    with pytest.raises(ValueError, match="batch must be a positive integer"):
        step_inputs(build_wan("tiny"), 0, 81, 480, 832)
    info = describe(build_wan("tiny"))
    with pytest.raises(ValueError, match="samples must name at least one"):
        make_batch(info, [], (16, 1, 2, 2))
    with pytest.raises(ValueError, match="latent must be \\(16, T, H, W\\), got \\(3, 1, 2, 2\\)"):
        make_batch(info, [0], (3, 1, 2, 2))
    with pytest.raises(ValueError, match="one epoch per sample \\(2\\), got 1"):
        make_batch(info, [0, 1], (16, 1, 2, 2), [0])
    with pytest.raises(ValueError, match="dtype must be"):
        build_wan("tiny", dtype=torch.int8)


def test_cast_keeps_diffusers_fp32_modules():
    m = build_wan("tiny", dtype=torch.bfloat16)
    keep = set(m._keep_in_fp32_modules)
    for name, p in m.named_parameters():
        want = torch.float32 if keep & set(name.split(".")) else torch.bfloat16
        assert p.dtype == want, name
    assert m.blocks[0].norm2.weight.dtype == torch.float32
    assert m.blocks[0].attn1.to_q.weight.dtype == torch.bfloat16
    assert m.rope.freqs_cos.dtype != torch.bfloat16  # non-persistent RoPE tables left as built


def test_one_step_fills_every_gradient_with_checkpointing():
    m = build_wan("tiny", layers=3, dtype=torch.bfloat16, checkpointing=True)
    assert m.gradient_checkpointing and len(m.blocks) == 3
    inputs = step_inputs(m, batch=2, frames=5, height=32, width=48)
    assert inputs["hidden_states"].shape == (2, 16, 2, 4, 6)
    assert (
        inputs["hidden_states"].dtype == torch.bfloat16 and inputs["target"].dtype == torch.float32
    )
    assert inputs["encoder_hidden_states"].shape == (2, 8, 24)  # the tiny model's text length
    batch = make_batch(describe(m), range(2), latent_shape(5, 32, 48))
    loss = forward_backward(m, batch)
    assert torch.isfinite(loss)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in m.parameters())
    g0 = m.blocks[0].attn1.to_q.weight.grad.clone()
    m.zero_grad(set_to_none=True)
    assert torch.equal(forward_backward(m, batch), loss)  # deterministic
    assert torch.equal(m.blocks[0].attn1.to_q.weight.grad, g0)


def test_make_batch_keys_data_by_sample_and_noise_by_epoch():
    info = describe(build_wan("tiny"))
    a = make_batch(info, [3, 7], (16, 2, 4, 4), seed=5)
    b = make_batch(info, [7], (16, 2, 4, 4), [1], seed=5)
    assert (a.B, a.S, b.B) == (2, 8, 1) and a.text.shape == (2, 8, 24)
    assert a.x0.dtype == a.eps.dtype == torch.float32 and ((a.t >= 0) & (a.t < 1)).all()
    assert torch.equal(a.x0[1], b.x0[0]) and torch.equal(a.text[1], b.text[0])  # same sample
    assert not torch.equal(a.eps[1], b.eps[0]) and a.t[1] != b.t[0]  # epoch 0 vs 1
    c = make_batch(info, [7], (16, 2, 4, 4), [0], seed=5)
    assert torch.equal(a.eps[1], c.eps[0]) and a.t[1] == c.t[0]  # epoch 0 again
    assert not torch.equal(make_batch(info, [7], (16, 2, 4, 4), seed=6).x0[0], c.x0[0])


def test_build_wan_describes_what_the_logs_name():
    from suite.model.wan import ModelInfo, describe

    m = build_wan("tiny", dtype="fp32", layers=1, text_len=5)
    assert describe(m) == ModelInfo("tiny", 1, 32, "wan", 5, 24)
    assert describe(build_wan("tiny")).text_len == 8  # the tiny default; 512 for the real configs
    assert describe(build_wan("wan-1.3b", device="meta")).text_len == 512
    assert describe(types.SimpleNamespace(module=m)) == describe(m)  # through a DDP wrapper
    with pytest.raises(ValueError, match="adaln must be one of"):
        build_wan("tiny", adaln="eager")
    with pytest.raises(ValueError, match="dtype must be one of"):
        build_wan("tiny", dtype="fp8")
    with pytest.raises(ValueError, match="not built by"):
        describe(torch.nn.Linear(2, 2))


def test_same_seed_same_weights():
    a, b = build_wan("tiny", seed=3), build_wan("tiny", seed=3)
    c = build_wan("tiny", seed=4)
    pa, pb, pc = (torch.cat([p.float().reshape(-1) for p in m.parameters()]) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)


class _Probe(torch.nn.Module):
    """A stand-in that records what the loss feeds the model and returns `out`."""

    def __init__(self, out):
        super().__init__()
        self.proj_out = torch.nn.Linear(1, 1).to(torch.bfloat16)
        self.out, self.seen = out, {}

    def forward(self, x, t, text, return_dict=True):
        self.seen = {"x": x, "t": t, "text": text}
        return (self.out,)


def test_flow_matching_loss_is_the_velocity_mse_in_fp32():
    g = torch.Generator().manual_seed(0)
    x0, eps = torch.randn(2, 16, 1, 4, 4, generator=g), torch.randn(2, 16, 1, 4, 4, generator=g)
    text, t = torch.randn(2, 3, 24, generator=g), torch.tensor([0.25, 0.75])
    batch = Batch(x0, text, t, eps)
    m = _Probe(torch.zeros_like(x0))
    loss = flow_matching_loss(m, batch)
    tt = t.view(-1, 1, 1, 1, 1)
    assert m.seen["x"].dtype == torch.bfloat16 and m.seen["text"].dtype == torch.bfloat16
    torch.testing.assert_close(m.seen["x"], ((1 - tt) * x0 + tt * eps).to(torch.bfloat16))
    torch.testing.assert_close(m.seen["t"], t * 1000)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, ((eps - x0) ** 2).mean())
    m.out = eps - x0  # the exact velocity: zero loss
    assert flow_matching_loss(m, batch).item() == 0.0


def test_tiny_model_trains_on_cpu():
    """A few AdamW steps of the training step on one fixed batch lower its loss (fp32, CPU)."""
    from suite.train.step import new_model

    torch.manual_seed(0)
    m, opt = new_model("tiny", dtype="fp32", checkpointing=True, lr=3e-3)
    batch = make_batch(describe(m), range(2), (16, 1, 8, 8))
    losses = []
    for _ in range(6):
        losses.append(forward_backward(m, batch).item())
        opt.step()
        opt.zero_grad()
    assert losses[-1] < losses[0]
