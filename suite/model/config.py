"""Model configurations as frozen dataclasses: tiny (CPU tests), wan-1.3b, wan-14b.

`get_config(name, layers=L)` overrides the layer count so realistic widths and sequence lengths fit
one GPU (the per-layer cost is what the balancing claims are about; depth only scales it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class DiTConfig:
    name: str
    dim: int  # model width D
    ffn_dim: int
    num_heads: int
    num_layers: int
    in_dim: int = 16  # VAE latent channels
    out_dim: int = 16
    patch_size: tuple[int, int, int] = (1, 2, 2)
    text_dim: int = 4096  # umT5-XXL width
    text_len: int = 512
    freq_dim: int = 256  # sinusoidal timestep embedding width
    eps: float = 1e-6

    def __post_init__(self) -> None:
        if self.dim % self.num_heads:
            raise ValueError(f"dim {self.dim} must be divisible by num_heads {self.num_heads}")
        if (self.dim // self.num_heads) % 2:
            raise ValueError(f"head dim {self.dim // self.num_heads} must be even for RoPE")
        if self.num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {self.num_layers}")

    @property
    def head_dim(self) -> int:
        return self.dim // self.num_heads


CONFIGS: dict[str, DiTConfig] = {
    "tiny": DiTConfig(
        "tiny", dim=64, ffn_dim=128, num_heads=4, num_layers=2, text_dim=32, text_len=8, freq_dim=32
    ),
    "wan-1.3b": DiTConfig("wan-1.3b", dim=1536, ffn_dim=8960, num_heads=12, num_layers=30),
    "wan-14b": DiTConfig("wan-14b", dim=5120, ffn_dim=13824, num_heads=40, num_layers=40),
}


def get_config(name: str, layers: int | None = None, **overrides) -> DiTConfig:
    """A named configuration, optionally with another layer count (or other field overrides)."""
    if name not in CONFIGS:
        raise ValueError(f"unknown model {name!r}; accepted: {', '.join(CONFIGS)}")
    cfg = CONFIGS[name]
    if layers is not None:
        overrides["num_layers"] = int(layers)
    return replace(cfg, **overrides) if overrides else cfg
