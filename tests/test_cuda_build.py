"""suite/cuda/build.py: the one build helper both fused ops compile through (CPU: NVRTC only)."""

from __future__ import annotations

import pytest

from suite.cuda.build import OpKernels
from suite.cuda.compile import DEFAULT_OPTIONS
from suite.ops.epilogue import cuda as ec
from suite.ops.fused_adaln import cuda as fc


@pytest.mark.parametrize("kernels", [fc.KERNELS, ec.KERNELS], ids=["fused_adaln", "epilogue"])
def test_width_check_names_the_op_and_the_range(kernels):
    kernels.check_d(1)
    kernels.check_d(kernels.max_d)
    for D in (0, kernels.max_d + 1):
        with pytest.raises(ValueError, match=rf"{kernels.op} supports 1 <= D <= 8192.*got D={D}"):
            kernels.check_d(D)


def test_both_ops_build_through_it():
    for mod in (fc, ec):
        assert isinstance(mod.KERNELS, OpKernels)
        assert mod.build == mod.KERNELS.build and mod.prebuild == mod.KERNELS.prebuild


def test_a_config_s_defines_become_compile_switches():
    base = ec.EpilogueConfig("bf16", "bf16", 1536, ec.WAN_FLAGS["rms"], True)
    lab = ec.EpilogueConfig("bf16", "bf16", 1536, ec.WAN_FLAGS["rms"], True, defines=("EP_X=1",))
    assert ec.KERNELS._job(base, "sm_90")[-1] == DEFAULT_OPTIONS
    assert ec.KERNELS._job(lab, "sm_90")[-1] == DEFAULT_OPTIONS + ("-DEP_X=1",)
    cfg = fc.all_configs(widths=(1536,))[0]  # fused configs carry no defines
    assert fc.KERNELS._job(cfg, "sm_90")[-1] == DEFAULT_OPTIONS


def test_program_is_built_once_per_config_and_arch():
    cfg = ec.EpilogueConfig("bf16", "bf16", 1536, ec.WAN_FLAGS["rms"], True)
    first = ec.KERNELS.program(cfg, "sm_90")
    assert ec.KERNELS.program(cfg, "sm_90") is first
    assert first.cubin == ec.build(cfg, "sm_90").cubin
    assert set(cfg.names()) <= set(first.names)
