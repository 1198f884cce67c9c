"""The Wan 2.1-style DiT: shapes, numerics of the AdaLN paths, RoPE, configs, the objective."""

import pytest
import torch

from suite.model import CONFIGS, WanDiT, flow_matching_loss, get_config
from suite.model.dit import apply_rope, modulate, rope_cos_sin


@pytest.fixture(autouse=True)
def _threads():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _inputs(b=2, f=3, h=8, w=8, cfg=None):
    cfg = cfg or get_config("tiny")
    g = torch.Generator().manual_seed(0)
    return torch.randn(b, 16, f, h, w, generator=g), torch.randn(
        b, cfg.text_len, cfg.text_dim, generator=g
    )


def test_configs_match_wan():
    c = CONFIGS["wan-1.3b"]
    assert (c.dim, c.num_layers, c.num_heads, c.ffn_dim) == (1536, 30, 12, 8960)
    c = CONFIGS["wan-14b"]
    assert (c.dim, c.num_layers, c.num_heads, c.ffn_dim) == (5120, 40, 40, 13824)
    assert get_config("wan-1.3b", layers=2).num_layers == 2
    with pytest.raises(ValueError, match="unknown model"):
        get_config("wan-7b")


def test_wan13b_parameter_count():
    with torch.device("meta"):
        m = WanDiT(get_config("wan-1.3b"))
    n = sum(p.numel() for p in m.parameters())
    assert 1.3e9 < n < 1.5e9


@pytest.mark.parametrize("adaln", ["wan", "eager"])
def test_forward_shape_and_backward(adaln):
    torch.manual_seed(0)
    m = WanDiT(get_config("tiny"), adaln=adaln)
    x, ctx = _inputs()
    y = m(x, torch.tensor([10.0, 900.0]), ctx)
    assert y.shape == x.shape
    loss = flow_matching_loss(m, x, ctx, torch.Generator().manual_seed(1))
    loss.backward()
    assert all(p.grad is not None for p in m.parameters())


def test_rejects_bad_latents():
    m = WanDiT(get_config("tiny"))
    with pytest.raises(ValueError, match="latents must be"):
        m(torch.randn(1, 3, 1, 8, 8), torch.zeros(1), torch.randn(1, 8, 32))
    with pytest.raises(ValueError, match="adaln must be"):
        WanDiT(get_config("tiny"), adaln="triton")


def test_wan_adaln_is_fp32_and_per_sample():
    x = torch.randn(2, 5, 16, dtype=torch.bfloat16)
    shift, scale = torch.randn(2, 1, 16), torch.randn(2, 1, 16)
    y = modulate(x, shift, scale, "wan", 1e-6)
    assert y.dtype == torch.float32
    ref = torch.nn.functional.layer_norm(x.float(), (16,), eps=1e-6) * (1 + scale) + shift
    torch.testing.assert_close(y, ref, atol=2e-2, rtol=0)  # LN output rounded to bf16 as in Wan
    y1 = modulate(x[1:], shift[1:], scale[1:], "wan", 1e-6)
    torch.testing.assert_close(y[1:], y1)


def test_eager_close_to_wan_under_autocast():
    torch.manual_seed(0)
    m = WanDiT(get_config("tiny"), adaln="wan")
    x, ctx = _inputs()
    t = torch.tensor([100.0, 500.0])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = m(x, t, ctx).float()
        m.set_adaln("eager")
        b = m(x, t, ctx).float()
    assert (a - b).abs().mean() / a.abs().mean() < 0.05


def test_rope_is_a_rotation_and_3d():
    cos, sin = rope_cos_sin(16, (2, 3, 4), "cpu")
    assert cos.shape == (24, 8)
    q = torch.randn(1, 24, 2, 16)
    r = apply_rope(q, cos, sin)
    torch.testing.assert_close(r.norm(dim=-1), q.norm(dim=-1))
    torch.testing.assert_close(apply_rope(q, cos[:1].expand(24, 8) * 0 + 1, sin * 0), q)


def test_unpatchify_inverts_patch_layout():
    m = WanDiT(get_config("tiny"))
    x = torch.arange(1 * 64 * 2 * 3 * 4, dtype=torch.float32).view(1, 2 * 3 * 4, 64)
    y = m.unpatchify(x, (2, 3, 4))
    assert y.shape == (1, 16, 2, 6, 8)


def test_checkpointing_gives_same_gradients():
    x, ctx = _inputs()
    grads = []
    for ckpt in (False, True):
        torch.manual_seed(0)
        m = WanDiT(get_config("tiny"), checkpointing=ckpt)
        flow_matching_loss(m, x, ctx, torch.Generator().manual_seed(3)).backward()
        grads.append(m.blocks[0].ffn[0].weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1])


def test_fused_adaln_path_matches_eager_on_cpu_reference():
    """On CPU suite.ops runs its reference arithmetic: the fused model path must agree with eager."""
    pytest.importorskip("suite.ops")
    torch.manual_seed(0)
    m = WanDiT(get_config("tiny"), adaln="eager")
    x, ctx = _inputs()
    t = torch.tensor([100.0, 500.0])
    a = m(x, t, ctx)
    m.set_adaln("fused")
    b = m(x, t, ctx)
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
