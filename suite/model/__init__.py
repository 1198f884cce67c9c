"""Wan 2.1-style video DiT (see ADAPTIVELOAD.md section 5)."""

from suite.model.config import CONFIGS, DiTConfig, get_config
from suite.model.dit import WanDiT, flow_matching_loss

__all__ = ["CONFIGS", "DiTConfig", "WanDiT", "flow_matching_loss", "get_config"]
from suite.model.wan import CONFIGS as WAN_CONFIGS  # noqa: E402
from suite.model.wan import WanConfig, build_wan, step_inputs, train_step  # noqa: E402

__all__ += ["WAN_CONFIGS", "WanConfig", "build_wan", "step_inputs", "train_step"]
