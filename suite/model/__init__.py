"""The reference model: diffusers' WanTransformer3DModel from the Wan 2.1 configs (suite.model.wan)."""

from suite.model.wan import (
    ADALN,
    CONFIGS,
    DTYPES,
    Batch,
    ModelInfo,
    WanConfig,
    build_wan,
    describe,
    flow_matching_loss,
    get_wan_config,
    latent_shape,
    make_batch,
    step_inputs,
)

__all__ = [
    "ADALN",
    "CONFIGS",
    "DTYPES",
    "Batch",
    "ModelInfo",
    "WanConfig",
    "build_wan",
    "describe",
    "flow_matching_loss",
    "get_wan_config",
    "latent_shape",
    "make_batch",
    "step_inputs",
]
