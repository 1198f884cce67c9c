"""One synchronised training step of diffusers' Wan model at any (B, S): step(B, S) -> (s, bytes,
optimizer s).

    from suite.train.stepfn import make_step_fn
    step = make_step_fn("wan-1.3b", device="cuda")   # 30 blocks, bf16, gradient checkpointing
    seconds, peak_bytes, optimizer_s = step(4, 14040)  # 4 samples of 14,040 tokens (33 480p frames)

`make_step_fn` builds `suite.model.wan.build_wan(...)` (diffusers' `WanTransformer3DModel`, random
init, cast as diffusers loads it) and one AdamW once. Each call draws random latents, timesteps and
text embeddings for B samples of S tokens on the device (outside the timed region), then times
`suite.model.wan.train_step` (fwd + MSE + bwd) + `optimizer.step()` between two device syncs and
returns the seconds, the peak allocated bytes of that step (0 on CPU) and the optimizer's share
(CUDA events from the end of the backward's work to the end of the optimizer's; wall time on
CPU). A step that runs out of device memory raises `suite.balance.shapebench.ShapeOutOfMemory`
after freeing what it held, so a sweep can record the shape as skipped and go on.

Token grid of S (patch units; the latent is (f, 2h, 2w)): S / 3600 frames of 45 x 80 (720x1280),
else S / 1560 frames of 30 x 52 (480x832), else the small grids of the CPU tests. RoPE follows the
grid; the cost depends on S only.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from suite.balance.shapebench import ShapeOutOfMemory
from suite.model.wan import ADALN, TEXT_LEN, build_wan, get_wan_config, train_step

# (tokens per latent frame, h, w) in patch units, tried in order; 46,800 is 720p (49 frames)
FRAME_GRIDS = ((3600, 45, 80), (1560, 30, 52), (256, 16, 16), (64, 8, 8), (16, 4, 4))
TINY_TEXT_LEN = 16  # text tokens for the tiny CPU config (Wan's 512 elsewhere)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def token_grid(S: int) -> tuple[int, int, int]:
    """(frames, h, w) in patch units with frames * h * w == S."""
    for per_frame, h, w in FRAME_GRIDS:
        if S >= per_frame and S % per_frame == 0:
            return (S // per_frame, h, w)
    raise ValueError(
        f"S must be a positive multiple of one of {[g[0] for g in FRAME_GRIDS]} tokens per "
        f"latent frame, got {S!r}"
    )


def _dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)} or a torch.dtype, got {dtype!r}")
    return DTYPES[dtype]


def make_step_fn(
    model: str = "wan-1.3b",
    layers: int | None = None,
    device: str = "cpu",
    adaln: str = "wan",
    dtype: str | torch.dtype = "bf16",
    checkpointing: bool = True,
    seed: int = 0,
    text_len: int | None = None,
    lr: float = 1e-5,
) -> Callable[[int, int], tuple[float, int, float]]:
    """step(B, S) -> (seconds, peak_bytes, optimizer_s) of one full training step of config
    `model` (a name of suite.model.wan.CONFIGS) with `layers` blocks (None: the config's);
    optimizer_s is the part of it after the backward (the AdamW step: what a step pays once,
    however many micro-batches it accumulates). Attributes: step.model (the diffusers model),
    step.config (its WanConfig), step.text_len, step.checkpointing."""
    if adaln not in ADALN:
        raise ValueError(f"adaln must be one of {ADALN}, got {adaln!r}")
    cfg = get_wan_config(model, layers)
    dev = torch.device(device)
    net = build_wan(
        model,
        layers=layers,
        dtype=_dtype(dtype),
        device=dev,
        checkpointing=checkpointing,
        seed=seed,
        adaln=adaln,
    )
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0.0)
    n_text = int(text_len or (TINY_TEXT_LEN if model == "tiny" else TEXT_LEN))
    gen = torch.Generator(device=dev).manual_seed(seed)
    x_dtype = net.proj_out.weight.dtype
    cuda = dev.type == "cuda"

    def inputs(B: int, S: int) -> dict[str, torch.Tensor]:
        f, h, w = token_grid(S)
        pt, ph, pw = cfg.patch_size
        latent = (B, cfg.in_channels, f * pt, h * ph, w * pw)

        def randn(*shape):
            return torch.randn(shape, device=dev, generator=gen, dtype=x_dtype)

        return {
            "hidden_states": randn(*latent),
            "timestep": torch.rand(B, device=dev, generator=gen) * 1000,
            "encoder_hidden_states": randn(B, n_text, cfg.text_dim),
            "target": randn(*latent),
        }

    def timed(B: int, S: int) -> tuple[float, int, float]:
        batch = inputs(B, S)
        if cuda:
            torch.cuda.synchronize(dev)
            torch.cuda.reset_peak_memory_stats(dev)
            marks = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        train_step(net, batch)
        if cuda:  # an event, not a sync: the optimizer's enqueue still overlaps the backward
            marks[0].record()
        t1 = time.perf_counter()
        opt.step()
        if cuda:
            marks[1].record()
            torch.cuda.synchronize(dev)
        t2 = time.perf_counter()
        opt_s = marks[0].elapsed_time(marks[1]) / 1e3 if cuda else t2 - t1
        return t2 - t0, int(torch.cuda.max_memory_allocated(dev)) if cuda else 0, opt_s

    def step(B: int, S: int) -> tuple[float, int, float]:
        if int(B) != B or B < 1:
            raise ValueError(f"B must be a positive integer, got {B!r}")
        try:
            return timed(int(B), int(S))
        except torch.OutOfMemoryError as e:
            reason = str(e).splitlines()[0]
        # outside the except block: the traceback (and the step's tensors) is gone
        net.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.empty_cache()
        raise ShapeOutOfMemory(B, S, reason)

    step.model, step.config, step.text_len, step.checkpointing = net, cfg, n_text, checkpointing
    return step
