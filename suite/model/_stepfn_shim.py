"""A shim for suite/train/stepfn.py (owned by the shape-sweep work, to be rewritten on build_wan):
the names it imports from the retired suite.model.dit / config and suite.train.trainer, giving
diffusers' Wan transformer. Delete with stepfn's rewrite.

    get_config(name, layers, text_len=...) -> a config with the fields stepfn reads
    WanDiT(cfg, adaln=, checkpointing=)     -> build_wan(...) in fp32 (autocast gives the dtype)
    forward_backward(model, x0, text, generator, dtype) -> the flow-matching loss, backward done
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from suite.model.wan import TEXT_LEN, TEXT_LENS, build_wan, flow_matching_loss, get_wan_config

_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}


@dataclass(frozen=True)
class StepfnConfig:
    name: str
    num_layers: int
    patch_size: tuple[int, int, int]
    in_dim: int
    text_len: int
    text_dim: int
    dim: int


def get_config(name: str, layers: int | None = None, text_len: int | None = None) -> StepfnConfig:
    c = get_wan_config(name, layers)
    tl = int(text_len or TEXT_LENS.get(name, TEXT_LEN))
    return StepfnConfig(name, c.num_layers, c.patch_size, c.in_channels, tl, c.text_dim, c.dim)


def WanDiT(cfg: StepfnConfig, adaln: str = "wan", checkpointing: bool = False):  # noqa: N802
    adaln = "wan" if adaln == "eager" else adaln  # diffusers has no bf16-LayerNorm path
    model = build_wan(
        cfg.name, layers=cfg.num_layers, dtype="fp32", checkpointing=checkpointing,
        adaln=adaln, text_len=cfg.text_len, seed=torch.initial_seed() % 2**63,
    )  # fmt: skip
    model.cfg = cfg
    return model


def forward_backward(model, x0, text, gen, dtype: str, scale: float = 1.0) -> torch.Tensor:
    t = torch.rand(x0.shape[0], device=x0.device, generator=gen)
    eps = torch.randn(x0.shape, device=x0.device, generator=gen, dtype=x0.dtype)
    amp = _AUTOCAST[dtype]
    with torch.autocast(x0.device.type, dtype=amp or torch.float32, enabled=amp is not None):
        loss = flow_matching_loss(model, x0, text, t, eps)
    (loss * scale).backward()
    return loss.detach()
