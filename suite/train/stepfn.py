"""The training step at any (B, S) for sweeps: step(B, S) -> (seconds, peak bytes, optimizer s).

    from suite.train.stepfn import make_step_fn
    step = make_step_fn("wan-1.3b", device="cuda")   # 30 blocks, bf16, gradient checkpointing
    seconds, peak_bytes, optimizer_s = step(4, 14040)  # 4 samples of 14,040 tokens (33 480p frames)

`make_step_fn` builds the model and AdamW once (suite.train.step.new_model: diffusers'
`WanTransformer3DModel`, random init, cast as diffusers loads it). Each call builds B samples of S
tokens with the one batch builder (suite.model.wan.make_batch: latent of `latent_for_tokens(S)`,
the model's text length, samples 0..B-1; on the device, outside the timed region), then times
the training step itself between two device syncs: suite.train.step.forward_backward (the
flow-matching loss training uses), then train_step's optimizer phase (step and zero_grad,
suite.train.instrument.optimizer_step). It returns the seconds, the peak allocated bytes of that
step (0 on CPU) and the optimizer's share (PhaseTimer: CUDA events from the end of the backward's
work to the end of the optimizer's; wall time on CPU). A step that runs out of device memory raises
`suite.balance.shapebench.ShapeOutOfMemory` after freeing what it held, so a sweep can record the
shape as skipped and go on.

Token grid of S (suite.model.wan.token_grid, patch units): S / 3600 frames of 45 x 80
(720x1280), else S / 1560 frames of 30 x 52 (480x832), else the small grids of the CPU tests.
RoPE follows the grid; the cost depends on S only.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from suite.balance.shapebench import ShapeOutOfMemory
from suite.model.wan import describe, get_wan_config, latent_for_tokens, make_batch
from suite.train.instrument import PhaseTimer, optimizer_step, peak_bytes, reset_peak
from suite.train.step import forward_backward, new_model


def make_step_fn(
    model: str = "wan-1.3b",
    layers: int | None = None,
    device: str = "cpu",
    adaln: str = "wan",
    dtype: str | torch.dtype = "bf16",
    checkpointing: bool = True,
    seed: int = 0,
    text_len: int | None = None,
    lr: float = 1e-4,
) -> Callable[[int, int], tuple[float, int, float]]:
    """step(B, S) -> (seconds, peak_bytes, optimizer_s) of one full training step of config
    `model` (a name of suite.model.wan.CONFIGS) with `layers` blocks (None: the config's), dtype
    a name of suite.model.wan.DTYPES or a torch float dtype;
    optimizer_s is the part of it after the backward (the AdamW step: what a step pays once,
    however many micro-batches it accumulates). Attributes: step.model (the diffusers model),
    step.config (its WanConfig), step.text_len, step.checkpointing."""
    cfg = get_wan_config(model, layers)
    dev = torch.device(device)
    net, opt = new_model(
        model, layers=layers, dtype=dtype, device=dev, checkpointing=checkpointing,
        seed=seed, adaln=adaln, text_len=text_len, lr=lr,
    )  # fmt: skip
    info = describe(net)
    cuda = dev.type == "cuda"

    def timed(B: int, S: int) -> tuple[float, int, float]:
        batch = make_batch(info, range(B), latent_for_tokens(S), seed=seed, device=dev)
        if cuda:
            torch.cuda.synchronize(dev)
        reset_peak(dev)
        timer = PhaseTimer(dev)
        t0 = time.perf_counter()
        forward_backward(net, batch)
        timer.mark("backward")  # an event, not a sync: the optimizer's enqueue still overlaps
        optimizer_step(opt, timer)  # train_step's optimizer phase; ends with a device sync
        seconds = time.perf_counter() - t0
        return seconds, peak_bytes(dev)[0], timer.seconds("backward", "optimizer")

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

    step.model, step.config, step.text_len, step.checkpointing = (
        net,
        cfg,
        info.text_len,
        checkpointing,
    )
    return step
