"""A synchronised training-step function for shape sweeps: step(B, S) -> (seconds, peak_bytes).

`make_step_fn(model="tiny", layers=None, device="cpu", adaln="wan", dtype="bf16")` builds the model
and an AdamW optimizer once; each call runs one full step (forward + backward + optimizer) on
synthetic inputs of B samples of S tokens, synchronised (CUDA events on a GPU, perf_counter on
CPU), and returns its seconds and the peak allocated bytes of that step (0 on CPU).

The token grid of S: (S / 1560, 30, 52) when S is a whole number of 480x832 frames, (S / 3600,
45, 80) for 720x1280 frames, else (1, 1, S). RoPE positions follow the grid; the cost does not.
"""

from __future__ import annotations

import torch

from suite.model import WanDiT, get_config
from suite.train.instrument import PhaseTimer, peak_bytes, reset_peak
from suite.train.trainer import forward_backward

FRAME_GRIDS = ((1560, 30, 52), (3600, 45, 80), (256, 16, 16), (64, 8, 8), (16, 4, 4))


def token_grid(S: int) -> tuple[int, int, int]:
    for per_frame, h, w in FRAME_GRIDS:
        if S % per_frame == 0:
            return (S // per_frame, h, w)
    return (1, 1, int(S))


def make_step_fn(
    model: str = "tiny",
    layers: int | None = None,
    device: str = "cpu",
    adaln: str = "wan",
    dtype: str = "bf16",
    seed: int = 0,
    text_len: int | None = None,
    checkpointing: bool = False,
):
    """Returns step(B, S) -> (seconds, peak_bytes); step.model is the model it trains."""
    dev = torch.device(device)
    overrides = {"text_len": text_len} if text_len else {}
    cfg = get_config(model, layers, **overrides)
    torch.manual_seed(seed)
    net = WanDiT(cfg, adaln=adaln, checkpointing=checkpointing).to(dev)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-5, weight_decay=0.0)
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)

    def step(B: int, S: int) -> tuple[float, int]:
        f, h, w = token_grid(int(S))
        pf, ph, pw = cfg.patch_size
        x0 = torch.randn((int(B), cfg.in_dim, f * pf, h * ph, w * pw), device=dev, generator=gen)
        ctx = torch.randn((int(B), cfg.text_len, cfg.text_dim), device=dev, generator=gen)
        reset_peak(dev)
        timer = PhaseTimer(dev)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        timer.mark("start")
        forward_backward(net, x0, ctx, gen, dtype)
        opt.step()
        opt.zero_grad(set_to_none=True)
        timer.mark("end")
        timer.finish()
        return timer.seconds("start", "end"), peak_bytes(dev)[0]

    step.model = net
    return step
