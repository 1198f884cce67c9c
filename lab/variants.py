"""Select a benchmark variant of the fused AdaLN kernels (lab only: the shipped op always runs
the shipped table's configuration). A variant is a named set of RuleConfig fields
(lab/kernel_variants.py, lab/kernel_rules.py); selecting one replaces suite.ops.fused_adaln.cuda's configuration lookup for
the whole process and drops its cached launch plans, so later calls (and a backward, which uses
the variant selected when it runs) launch that variant's kernels.
"""

from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import replace

from lab.kernel_rules import RuleConfig
from lab.kernel_variants import VARIANTS
from suite.ops.fused_adaln import cuda as fused_cuda
from suite.ops.fused_adaln.kernel_config import KernelConfig

VARIANT_ENV = "ADAPTIVELOAD_ADALN_VARIANT"
_shipped = fused_cuda._config
_current = ["default"]


def check(name: str) -> str:
    if name not in VARIANTS:
        raise ValueError(f"unknown AdaLN kernel variant {name!r}; known: {sorted(VARIANTS)}")
    return name


def variant_config(cfg: KernelConfig | RuleConfig, name: str) -> RuleConfig:
    """`cfg` (a shipped configuration or a rule configuration) with the fields of variant
    `name`."""
    fields = VARIANTS[check(name)]
    if not isinstance(cfg, RuleConfig):
        cfg = RuleConfig(cfg.tx, cfg.tm, cfg.ty, cfg.D, cfg.mode)
    return replace(cfg, **fields)


@functools.cache
def _config_of(name: str):
    @functools.cache
    def config(tx, tm, ty, D: int, mode: int) -> RuleConfig:
        return variant_config(_shipped(tx, tm, ty, D, mode), name)

    return config


def set_variant(name: str) -> str:
    """Select variant `name` for later calls; returns the previous one."""
    prev = _current[0]
    if check(name) != prev:
        fused_cuda._config = _shipped if name == "default" else _config_of(name)
        fused_cuda.clear_plans()
        _current[0] = name
    return prev


def get_variant() -> str:
    return _current[0]


@contextlib.contextmanager
def use_variant(name: str):
    prev = set_variant(name)
    try:
        yield
    finally:
        set_variant(prev)


ENV_VARIANT = check(os.environ.get(VARIANT_ENV) or "default")
