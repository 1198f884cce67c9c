"""A faithful Wan 2.1 DiT: patch embedding, timestep -> 6-way fp32 modulation, blocks of
(modulated LN -> self-attention with 3D RoPE, gated residual), (affine LN -> cross-attention to
text), (modulated LN -> FFN, gated residual), and the modulated head; flow-matching objective.

AdaLN implementations (`adaln=`), the only thing the kernel claims change:
- "wan":   official numerics: LayerNorm in fp32, modulation in fp32; the residual stream becomes
           fp32 (the gates are fp32), exactly as the public Wan 2.1 code under bf16 autocast.
- "eager": LayerNorm + modulation in the activation dtype (bf16 under autocast), bf16 residual.
- "fused": the suite's fused LayerNorm-Modulate op (suite.ops), bf16 residual.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from suite.model.config import DiTConfig

ADALN_IMPLS = ("wan", "eager", "fused")


def _fused_adaln():
    """The fused op of suite.ops: adaln(x, scale, shift, eps) -> LN(x) * (1 + scale) + shift."""
    try:
        import suite.ops as ops
    except ImportError as e:  # pragma: no cover - depends on the kernel issue
        raise RuntimeError(
            "adaln='fused' needs suite.ops (the fused AdaLN op); not importable"
        ) from e
    fn = getattr(ops, "adaln", None)
    if not callable(fn):
        raise RuntimeError("adaln='fused': suite.ops defines no adaln(x, scale, shift, eps)")
    return fn


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor, impl: str, eps: float):
    """y = LN(x) * (1 + scale) + shift with per-sample [B, 1, D] fp32 shift/scale."""
    if impl == "wan":
        return (
            F.layer_norm(x.float(), x.shape[-1:], eps=eps).type_as(x).float() * (1 + scale) + shift
        )
    if impl == "eager":
        dt = (
            torch.get_autocast_dtype(x.device.type)
            if torch.is_autocast_enabled(x.device.type)
            else x.dtype
        )
        xl = x.to(dt)
        return F.layer_norm(xl, x.shape[-1:], eps=eps) * (1 + scale.to(dt)) + shift.to(dt)
    if impl == "fused":
        dt = (
            torch.get_autocast_dtype(x.device.type)
            if torch.is_autocast_enabled(x.device.type)
            else x.dtype
        )
        with torch.autocast(x.device.type, enabled=False):
            return _fused_adaln()(x.to(dt), scale, shift, eps)
    raise ValueError(f"adaln must be one of {ADALN_IMPLS}, got {impl!r}")


def sinusoidal_embedding_1d(dim: int, position: torch.Tensor) -> torch.Tensor:
    half = dim // 2
    position = position.double()
    freqs = torch.outer(
        position, torch.pow(10000, -torch.arange(half, device=position.device).double().div(half))
    )
    return torch.cat([torch.cos(freqs), torch.sin(freqs)], dim=1).float()


def rope_cos_sin(head_dim: int, grid: tuple[int, int, int], device, theta: float = 10000.0):
    """Wan's 3D RoPE: the head dim split into (frames, height, width) parts; cos/sin [S, d/2]."""
    c = head_dim // 2
    parts = (c - 2 * (c // 3), c // 3, c // 3)  # = (d - 4*(d//6), 2*(d//6), 2*(d//6)) / 2
    angles = []
    for n, sub in zip(grid, parts):
        dim = 2 * sub
        inv = 1.0 / torch.pow(
            theta, torch.arange(0, dim, 2, device=device, dtype=torch.float64) / dim
        )
        angles.append(torch.outer(torch.arange(n, device=device, dtype=torch.float64), inv))
    f, h, w = grid
    a = torch.cat(
        [
            angles[0][:, None, None, :].expand(f, h, w, -1),
            angles[1][None, :, None, :].expand(f, h, w, -1),
            angles[2][None, None, :, :].expand(f, h, w, -1),
        ],
        dim=-1,
    ).reshape(f * h * w, c)
    return a.cos().float(), a.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, S, H, d]; rotate adjacent pairs (Wan: view_as_complex over pairs), in fp32."""
    xf = x.float().unflatten(-1, (-1, 2))
    x0, x1 = xf[..., 0], xf[..., 1]
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2).type_as(x)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return (
            x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        ).type_as(x) * self.weight


class Attention(nn.Module):
    """Self- or cross-attention with q/k RMSNorm (Wan's qk_norm), torch SDPA."""

    def __init__(self, cfg: DiTConfig):
        super().__init__()
        d = cfg.dim
        self.heads = cfg.num_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.norm_q, self.norm_k = RMSNorm(d, cfg.eps), RMSNorm(d, cfg.eps)

    def forward(self, x, context=None, rope=None):
        ctx = x if context is None else context
        q = self.norm_q(self.q(x)).unflatten(-1, (self.heads, -1))
        k = self.norm_k(self.k(ctx)).unflatten(-1, (self.heads, -1))
        v = self.v(ctx).unflatten(-1, (self.heads, -1))
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v.to(q.dtype))
        return self.o(out.transpose(1, 2).flatten(-2))


class Block(nn.Module):
    def __init__(self, cfg: DiTConfig, adaln: str):
        super().__init__()
        self.cfg, self.adaln = cfg, adaln
        self.self_attn = Attention(cfg)
        self.norm3 = nn.LayerNorm(cfg.dim, eps=cfg.eps, elementwise_affine=True)
        self.cross_attn = Attention(cfg)
        self.ffn = nn.Sequential(
            nn.Linear(cfg.dim, cfg.ffn_dim),
            nn.GELU(approximate="tanh"),
            nn.Linear(cfg.ffn_dim, cfg.dim),
        )
        self.modulation = nn.Parameter(torch.randn(1, 6, cfg.dim) / cfg.dim**0.5)

    def _residual(self, x, y, gate):
        if self.adaln == "wan":
            return x + y * gate  # fp32 gate -> fp32 residual stream, as in Wan 2.1
        return x + (y * gate.to(y.dtype)).to(x.dtype)

    def forward(self, x, e, context, rope):
        with torch.autocast(x.device.type, enabled=False):
            e = (self.modulation.float() + e.float()).chunk(6, dim=1)  # six [B, 1, D] fp32 views
        eps = self.cfg.eps
        y = self.self_attn(modulate(x, e[0], e[1], self.adaln, eps), rope=rope)
        x = self._residual(x, y, e[2])
        if self.adaln == "wan":
            xn = F.layer_norm(
                x.float(), x.shape[-1:], self.norm3.weight.float(), self.norm3.bias.float(), eps
            ).type_as(x)
        else:
            xn = self.norm3(x)
        x = x + self.cross_attn(xn, context=context).to(x.dtype)
        y = self.ffn(modulate(x, e[3], e[4], self.adaln, eps))
        return self._residual(x, y, e[5])


class WanDiT(nn.Module):
    def __init__(self, cfg: DiTConfig, adaln: str = "wan", checkpointing: bool = False):
        super().__init__()
        if adaln not in ADALN_IMPLS:
            raise ValueError(f"adaln must be one of {ADALN_IMPLS}, got {adaln!r}")
        self.cfg, self.adaln, self.checkpointing = cfg, adaln, checkpointing
        d = cfg.dim
        self.patch_embedding = nn.Conv3d(
            cfg.in_dim, d, kernel_size=cfg.patch_size, stride=cfg.patch_size
        )
        self.text_embedding = nn.Sequential(
            nn.Linear(cfg.text_dim, d), nn.GELU(approximate="tanh"), nn.Linear(d, d)
        )
        self.time_embedding = nn.Sequential(nn.Linear(cfg.freq_dim, d), nn.SiLU(), nn.Linear(d, d))
        self.time_projection = nn.Sequential(nn.SiLU(), nn.Linear(d, 6 * d))
        self.blocks = nn.ModuleList(Block(cfg, adaln) for _ in range(cfg.num_layers))
        self.head_modulation = nn.Parameter(torch.randn(1, 2, d) / d**0.5)
        self.head = nn.Linear(d, cfg.out_dim * math.prod(cfg.patch_size))
        self._rope_cache: dict = {}

    def set_adaln(self, impl: str) -> None:
        if impl not in ADALN_IMPLS:
            raise ValueError(f"adaln must be one of {ADALN_IMPLS}, got {impl!r}")
        self.adaln = impl
        for b in self.blocks:
            b.adaln = impl

    def rope(self, grid, device):
        key = (tuple(grid), str(device))
        if key not in self._rope_cache:
            self._rope_cache[key] = rope_cos_sin(self.cfg.head_dim, grid, device)
        return self._rope_cache[key]

    def forward(
        self, latents: torch.Tensor, t: torch.Tensor, context: torch.Tensor
    ) -> torch.Tensor:
        """latents [B, C, F, H, W]; t [B] in [0, 1000]; context [B, L, text_dim] -> [B, C, F, H, W]."""
        cfg = self.cfg
        if latents.dim() != 5 or latents.shape[1] != cfg.in_dim:
            raise ValueError(
                f"latents must be [B, {cfg.in_dim}, F, H, W], got {list(latents.shape)}"
            )
        x = self.patch_embedding(latents)
        grid = tuple(x.shape[2:])
        x = x.flatten(2).transpose(1, 2)  # [B, S, D]
        with torch.autocast(x.device.type, enabled=False):
            e = self.time_embedding(sinusoidal_embedding_1d(cfg.freq_dim, t).float())
            e0 = self.time_projection(e).unflatten(1, (6, cfg.dim))  # [B, 6, D] fp32
        ctx = self.text_embedding(context)
        rope = self.rope(grid, x.device)
        for block in self.blocks:
            if self.checkpointing and self.training:
                x = checkpoint(block, x, e0, ctx, rope, use_reentrant=False)
            else:
                x = block(x, e0, ctx, rope)
        with torch.autocast(x.device.type, enabled=False):
            he = (self.head_modulation.float() + e.float().unsqueeze(1)).chunk(2, dim=1)
        impl = "wan" if self.adaln == "wan" else self.adaln
        x = self.head(modulate(x, he[0], he[1], impl, cfg.eps))
        return self.unpatchify(x, grid)

    def unpatchify(self, x, grid):
        pf, ph, pw = self.cfg.patch_size
        f, h, w = grid
        b = x.shape[0]
        x = x.view(b, f, h, w, pf, ph, pw, self.cfg.out_dim)
        x = x.permute(0, 7, 1, 4, 2, 5, 3, 6)
        return x.reshape(b, self.cfg.out_dim, f * pf, h * ph, w * pw)


def flow_matching_loss(
    model: nn.Module,
    x0: torch.Tensor,
    context: torch.Tensor,
    generator: torch.Generator | None = None,
    shift: float = 1.0,
) -> torch.Tensor:
    """Rectified flow (Wan): x_t = (1 - t) x0 + t eps, target eps - x0, MSE.

    Loss normalisation: the mean over every element of the batch, i.e. the mean over the batch's
    latent tokens (and channels). With per-bucket batch sizes each rank's loss is its own batch's
    token mean, and data parallelism averages the ranks' gradients with equal weight.
    """
    b = x0.shape[0]
    t = torch.rand(b, device=x0.device, generator=generator)
    if shift != 1.0:
        t = shift * t / (1 + (shift - 1) * t)
    eps = torch.randn(x0.shape, device=x0.device, generator=generator, dtype=x0.dtype)
    tt = t.view(b, 1, 1, 1, 1)
    xt = (1 - tt) * x0 + tt * eps
    pred = model(xt, t * 1000, context)
    return F.mse_loss(pred.float(), (eps - x0).float())
