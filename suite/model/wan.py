"""diffusers' `WanTransformer3DModel` built from the Wan 2.1 configs with random init (no weights
are downloaded or needed: the suite times steps, it does not generate), the one batch builder and
the flow-matching loss every training step uses.

    from suite.model.wan import build_wan, describe, latent_shape, make_batch, flow_matching_loss
    model = build_wan("wan-1.3b", device="cuda", checkpointing=True)   # bf16, fp32 kept modules
    batch = make_batch(describe(model), range(2), latent_shape(81, 480, 832), device="cuda")
    loss = flow_matching_loss(model, batch)                            # fp32 velocity MSE

`make_batch` is the one place training inputs are drawn: B samples of one latent shape (so one
sequence length S), each sample's latent and text from (seed, sample), its timestep and noise from
(seed, sample, epoch). The trainer, the emulator and the real ranks give it a plan's corpus
samples (suite.train.data.corpus_batch); the shape sweep (`latent_for_tokens(S)`), the e2e
benchmark and warm-up give it B samples of one shape. The forward + backward on it is
suite.train.step.forward_backward.

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
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from suite.data.geometry import TEMPORAL_STRIDE, check_shape

LATENT_CHANNELS = 16
VAE_SPATIAL = 8  # VAE stride in height and width (x the patch (1, 2, 2): geometry.SPATIAL_STRIDE)
PATCH = (1, 2, 2)  # latent (frames, height, width) per token
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
    patch_size: tuple[int, int, int] = PATCH
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
# text tokens per sample every step feeds (umT5's 512 for the real configs; few for CPU tests)
TEXT_LENS = {"tiny": 8}
# (tokens per latent frame, h, w) in patch units, tried in order, for a sample given by S alone:
# 720x1280 (3600), 480x832 (1560), then small grids for the CPU tests; 46,800 is 720p, 49 frames
FRAME_GRIDS = ((3600, 45, 80), (1560, 30, 52), (256, 16, 16), (64, 8, 8), (16, 4, 4))


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


def latent_shape(frames: int, height: int, width: int) -> tuple[int, int, int, int]:
    """(16, (F-1)/4 + 1, H/8, W/8): the VAE latent of one clip of F frames at H x W."""
    check_shape(height, width, frames)  # raises ValueError naming what is wrong
    t = (frames - 1) // TEMPORAL_STRIDE + 1
    return (LATENT_CHANNELS, t, height // VAE_SPATIAL, width // VAE_SPATIAL)


def token_grid(S: int) -> tuple[int, int, int]:
    """(frames, h, w) in patch units with frames * h * w == S (FRAME_GRIDS, first that divides)."""
    for per_frame, h, w in FRAME_GRIDS:
        if S >= per_frame and S % per_frame == 0:
            return (S // per_frame, h, w)
    raise ValueError(
        f"S must be a positive multiple of one of {[g[0] for g in FRAME_GRIDS]} tokens per "
        f"latent frame, got {S!r}"
    )


def latent_for_tokens(S: int) -> tuple[int, int, int, int]:
    """The latent of one sample of S tokens (`token_grid`): RoPE follows the grid, the cost S."""
    return (LATENT_CHANNELS, *(n * p for n, p in zip(token_grid(S), PATCH)))


@dataclass(frozen=True)
class Batch:
    """B samples of one latent shape, fp32: what one flow-matching forward + backward takes."""

    x0: Tensor  # [B, 16, T, H, W] clean latents
    text: Tensor  # [B, text_len, text_dim] text embeddings
    t: Tensor  # [B] timesteps in [0, 1)
    eps: Tensor  # noise, x0's shape

    @property
    def B(self) -> int:
        return int(self.x0.shape[0])

    @property
    def S(self) -> int:
        """Tokens per sample after the patch."""
        return int(np.prod(self.x0.shape[2:])) // int(np.prod(PATCH))


def _data_generator(device: torch.device, seed: int, sample: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed((seed * 1_000_003 + sample) % (2**63 - 1))


def _noise_generator(device: torch.device, seed: int, sample: int, epoch: int) -> torch.Generator:
    key = np.random.SeedSequence([seed, sample, epoch, 0x6E6F697365])  # "noise"
    return torch.Generator(device=device).manual_seed(int(key.generate_state(1, np.uint64)[0]) >> 1)


def make_batch(
    info: ModelInfo,
    samples: Sequence[int],
    latent: tuple[int, ...],
    epochs: Sequence[int] | None = None,
    *,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> Batch:
    """The one batch builder: B = len(samples) samples of `latent` (16, T, H, W) for a model
    `info` describes (its text_len and text_dim). Sample i's latent and text come from
    (seed, i), whatever batch, rank or policy it lands in; its timestep and noise from
    (seed, i, epoch), epoch = its earlier appearances in training (default 0), so every policy
    trains a sample with the same noise and a sample seen again gets fresh noise."""
    samples = [int(i) for i in samples]
    if not samples:
        raise ValueError("samples must name at least one sample, got none")
    epochs = [0] * len(samples) if epochs is None else [int(e) for e in epochs]
    if len(epochs) != len(samples):
        raise ValueError(
            f"epochs must give one epoch per sample ({len(samples)}), got {len(epochs)}"
        )
    latent = tuple(int(n) for n in latent)
    if len(latent) != 4 or latent[0] != LATENT_CHANNELS:
        raise ValueError(f"latent must be ({LATENT_CHANNELS}, T, H, W), got {latent}")
    device = torch.device(device)
    x0, text, t, eps = [], [], [], []
    for i, e in zip(samples, epochs):
        g = _data_generator(device, int(seed), i)
        x0.append(torch.randn(latent, generator=g, device=device))
        text.append(torch.randn((info.text_len, info.text_dim), generator=g, device=device))
        g = _noise_generator(device, int(seed), i, e)
        t.append(torch.rand(1, generator=g, device=device))
        eps.append(torch.randn(latent, generator=g, device=device))
    return Batch(torch.stack(x0), torch.stack(text), torch.cat(t), torch.stack(eps))


def flow_inputs(batch: Batch, dtype: torch.dtype) -> dict[str, Tensor]:
    """The model's inputs and the target of the rectified-flow loss: x_t = (1 - t) x0 + t eps
    (computed in fp32, then `dtype`), timestep t * 1000, text in `dtype`, and the velocity
    eps - x0 (fp32)."""
    x0, eps = batch.x0.float(), batch.eps.float()
    tt = batch.t.float().view(-1, 1, 1, 1, 1)
    return {
        "hidden_states": ((1 - tt) * x0 + tt * eps).to(dtype),
        "timestep": batch.t.float() * 1000,
        "encoder_hidden_states": batch.text.to(dtype),
        "target": eps - x0,
    }


def flow_matching_loss(model: nn.Module, batch: Batch) -> Tensor:
    """The training objective: the mean over every latent element of (model(x_t) - (eps - x0))^2
    in fp32, the inputs cast to the model's dtype (`flow_inputs`)."""
    inputs = flow_inputs(batch, getattr(model, "module", model).proj_out.weight.dtype)  # DDP too
    out = model(
        inputs["hidden_states"],
        inputs["timestep"],
        inputs["encoder_hidden_states"],
        return_dict=False,
    )[0]
    return torch.nn.functional.mse_loss(out.float(), inputs["target"])


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
    """`flow_inputs` of `batch` clips of (frames, height, width) from `make_batch` (samples
    0..batch-1): for code that calls the model's forward itself (the fused-op checks)."""
    if int(batch) != batch or batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    b = make_batch(describe(model), range(int(batch)), latent_shape(frames, height, width),
                   seed=seed, device=device)  # fmt: skip
    return flow_inputs(b, model.proj_out.weight.dtype)
