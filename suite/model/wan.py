"""diffusers' `WanTransformer3DModel` built from the Wan 2.1 configs with random init (no weights
are downloaded or needed: the suite times steps, it does not generate), and one training step.

    from suite.model.wan import build_wan, step_inputs, train_step
    model = build_wan("wan-1.3b", device="cuda", checkpointing=True)   # bf16, fp32 kept modules
    inputs = step_inputs(model, batch=1, frames=81, height=480, width=832, device="cuda")
    loss = train_step(model, inputs)                                   # fwd + MSE + bwd
    loss = flow_matching_loss(model, x0, text, t, eps)                 # the trainer's objective

`adaln="fused"` swaps the modulated norms for the suite's fused op (`suite.ops.diffusers.patch_wan`);
"wan" is diffusers' own forward (LayerNorm and modulation in fp32). `describe(model)` gives the
log columns every training row carries (model, layers, dim, adaln, text_len, text_dim).

The configs are Wan 2.1's own (wan/configs/wan_t2v_1_3B.py and wan_t2v_14B.py of the Wan 2.1
release, in diffusers' names as scripts/convert_wan_to_diffusers.py maps them). The dtype cast
is the one `from_pretrained(torch_dtype=...)` does: every parameter whose dotted name has a part
in `_keep_in_fp32_modules` (rope, time_embedder, scale_shift_table, norm1, norm2, norm3) stays
fp32, the rest takes the dtype, and the non-persistent RoPE tables keep the dtype they were built
in (float64), as diffusers' loading leaves them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from suite.data.geometry import TEMPORAL_STRIDE, tokens

LATENT_CHANNELS = 16
VAE_SPATIAL = 8  # VAE stride in height and width (x the patch (1, 2, 2): geometry.SPATIAL_STRIDE)
TEXT_LEN = 512  # umT5 tokens per prompt (Wan 2.1's text_len)
ADALN = ("wan", "fused")  # diffusers' own modulated norms, or patch_wan's fused op
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


@dataclass(frozen=True)
class WanConfig:
    """The arguments of `WanTransformer3DModel(...)` that name a Wan 2.1 T2V model."""

    num_attention_heads: int
    attention_head_dim: int
    ffn_dim: int
    num_layers: int
    patch_size: tuple[int, int, int] = (1, 2, 2)
    in_channels: int = LATENT_CHANNELS
    out_channels: int = LATENT_CHANNELS
    text_dim: int = 4096
    freq_dim: int = 256
    cross_attn_norm: bool = True
    qk_norm: str = "rms_norm_across_heads"
    eps: float = 1e-6

    @property
    def dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim


CONFIGS: dict[str, WanConfig] = {
    # 2 blocks, D = 32: a fwd+bwd on CPU in milliseconds, for tests
    "tiny": WanConfig(
        num_attention_heads=2, attention_head_dim=16, ffn_dim=64, num_layers=2, text_dim=24,
        freq_dim=16,
    ),
    "wan-1.3b": WanConfig(num_attention_heads=12, attention_head_dim=128, ffn_dim=8960, num_layers=30),
    "wan-14b": WanConfig(num_attention_heads=40, attention_head_dim=128, ffn_dim=13824, num_layers=40),
}  # fmt: skip
# text tokens per sample the trainer feeds (umT5's 512 for the real configs; few for CPU tests)
TEXT_LENS = {"tiny": 8}


@dataclass(frozen=True)
class ModelInfo:
    """What a built model is, as the training logs name it."""

    model: str
    layers: int
    dim: int
    adaln: str
    text_len: int
    text_dim: int


def get_wan_config(name: str, layers: int | None = None) -> WanConfig:
    """The named config, with `layers` blocks instead of the config's when given."""
    if name not in CONFIGS:
        raise ValueError(f"name must be one of {sorted(CONFIGS)}, got {name!r}")
    cfg = CONFIGS[name]
    if layers is not None:
        if int(layers) != layers or layers < 1:
            raise ValueError(f"layers must be a positive integer, got {layers!r}")
        cfg = dataclasses.replace(cfg, num_layers=int(layers))
    return cfg


def cast_like_diffusers(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """Cast in place as `from_pretrained(torch_dtype=dtype)` does: parameters and persistent
    buffers whose dotted name has a part in `model._keep_in_fp32_modules` become fp32, other
    floating ones `dtype`; non-persistent buffers are left as built."""
    keep = set(getattr(model, "_keep_in_fp32_modules", None) or ())
    for mod_name, mod in model.named_modules():
        parts = set(mod_name.split(".")) if mod_name else set()
        for key, t in list(mod._parameters.items()) + list(mod._buffers.items()):
            if t is None or not t.is_floating_point() or key in mod._non_persistent_buffers_set:
                continue
            target = torch.float32 if (parts | {key}) & keep else dtype
            t.data = t.data.to(target)
    return model


def build_wan(
    name: str = "wan-1.3b",
    *,
    layers: int | None = None,
    dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device = "cpu",
    checkpointing: bool = False,
    seed: int = 0,
    adaln: str = "wan",
    text_len: int | None = None,
) -> nn.Module:
    """A randomly initialised `WanTransformer3DModel` of config `name` on `device`, cast as
    diffusers' loading casts, in train mode; `checkpointing` turns on diffusers' per-block
    gradient checkpointing (`enable_gradient_checkpointing()`), as Wan training uses it;
    adaln="fused" applies `suite.ops.diffusers.patch_wan`. The same seed gives the same weights.
    `text_len` (default TEXT_LENS, else 512) is what `describe` reports to the data side."""
    from diffusers import WanTransformer3DModel

    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
        dtype = DTYPES[dtype]
    if dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {dtype}")
    if adaln not in ADALN:
        raise ValueError(f"adaln must be one of {ADALN}, got {adaln!r}")
    cfg = get_wan_config(name, layers)
    torch.manual_seed(seed)
    with torch.device(device):  # initialise where it runs: 1.3B is 5 GB of fp32 before the cast
        model = WanTransformer3DModel(**dataclasses.asdict(cfg))
    cast_like_diffusers(model, dtype)
    if checkpointing:
        model.enable_gradient_checkpointing()
    if adaln == "fused":
        from suite.ops.diffusers import patch_wan

        patch_wan(model)
    text_len = int(text_len or TEXT_LENS.get(name, TEXT_LEN))
    model.suite_info = ModelInfo(name, cfg.num_layers, cfg.dim, adaln, text_len, cfg.text_dim)
    return model.train()


def describe(model: nn.Module) -> ModelInfo:
    """The ModelInfo `build_wan` attached (through a DDP wrapper too)."""
    info = getattr(getattr(model, "module", model), "suite_info", None)
    if info is None:
        raise ValueError("describe: the model was not built by suite.model.wan.build_wan")
    return info


def flow_matching_loss(
    model: nn.Module, x0: Tensor, text: Tensor, t: Tensor, eps: Tensor
) -> Tensor:
    """Rectified-flow loss of one model batch, fp32: x_t = (1 - t) x0 + t eps is denoised at
    timestep t * 1000 against the velocity eps - x0; the mean over every latent element.
    x0, eps [B, 16, T, H, W] and text [B, L, text_dim] in any float dtype (cast to the model's),
    t [B] in [0, 1)."""
    dtype = getattr(model, "module", model).proj_out.weight.dtype  # through DDP too
    tt = t.float().view(-1, 1, 1, 1, 1)
    xt = ((1 - tt) * x0.float() + tt * eps.float()).to(dtype)
    out = model(xt, t.float() * 1000, text.to(dtype), return_dict=False)[0]
    return torch.nn.functional.mse_loss(out.float(), (eps.float() - x0.float()))


def latent_shape(batch: int, frames: int, height: int, width: int) -> tuple[int, ...]:
    """[B, 16, (F-1)/4 + 1, H/8, W/8]: the VAE latents of B clips of F frames at H x W."""
    tokens(height, width, frames)  # validates the shape (raises ValueError naming what is wrong)
    if int(batch) != batch or batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    t = (frames - 1) // TEMPORAL_STRIDE + 1
    return (batch, LATENT_CHANNELS, t, height // VAE_SPATIAL, width // VAE_SPATIAL)


def step_inputs(
    model: nn.Module,
    batch: int,
    frames: int,
    height: int,
    width: int,
    *,
    device: str | torch.device = "cpu",
    seed: int = 0,
) -> dict[str, Tensor]:
    """Random inputs of one training step: latents, timesteps in [0, 1000), text embeddings
    [B, 512, text_dim] and the regression target (latents' shape), in the model's dtype."""
    cfg = model.config
    dtype = model.proj_out.weight.dtype
    shape = latent_shape(batch, frames, height, width)
    g = torch.Generator(device="cpu").manual_seed(seed)

    def randn(*s):
        return torch.randn(*s, generator=g).to(device=device, dtype=dtype)

    return {
        "hidden_states": randn(*shape),
        "timestep": (torch.rand(batch, generator=g) * 1000).to(device),
        "encoder_hidden_states": randn(batch, TEXT_LEN, cfg.text_dim),
        "target": randn(*shape),
    }


def step_tokens(frames: int, height: int, width: int) -> int:
    """Tokens per sample that a step on (frames, height, width) sees (suite.data.geometry)."""
    return tokens(height, width, frames)


def train_step(model: nn.Module, inputs: dict[str, Tensor]) -> Tensor:
    """One fwd+bwd: gradients set to None first, loss = MSE(model(x), target) in fp32,
    backward into the parameters' .grad. Returns the detached loss (no host sync)."""
    model.zero_grad(set_to_none=True)
    out = model(
        inputs["hidden_states"],
        inputs["timestep"],
        inputs["encoder_hidden_states"],
        return_dict=False,
    )[0]
    loss = torch.nn.functional.mse_loss(out.float(), inputs["target"].float())
    loss.backward()
    return loss.detach()
