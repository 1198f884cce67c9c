"""The reference model: diffusers' WanTransformer3DModel from the Wan 2.1 configs (suite.model.wan)."""

# the names suite/train/stepfn.py still imports (a shim until its rewrite on build_wan)
from suite.model._stepfn_shim import WanDiT, get_config  # noqa: E402,F401
from suite.model.wan import (
    ADALN,
    CONFIGS,
    DTYPES,
    ModelInfo,
    WanConfig,
    build_wan,
    describe,
    flow_matching_loss,
    get_wan_config,
    step_inputs,
    train_step,
)

__all__ = [
    "ADALN",
    "CONFIGS",
    "DTYPES",
    "ModelInfo",
    "WanConfig",
    "build_wan",
    "describe",
    "flow_matching_loss",
    "get_wan_config",
    "step_inputs",
    "train_step",
]
