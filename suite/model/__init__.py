"""Wan 2.1-style video DiT (see ADAPTIVELOAD.md section 5)."""

from suite.model.config import CONFIGS, DiTConfig, get_config
from suite.model.dit import WanDiT, flow_matching_loss

__all__ = ["CONFIGS", "DiTConfig", "WanDiT", "flow_matching_loss", "get_config"]
