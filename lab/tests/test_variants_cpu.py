"""CPU tests of the tuning lab's kernel variants (lab/kernel_variants.py, lab/variants.py) and
latency model (lab/kernel_model.py): every variant compiles with NVRTC for sm_90 without spills,
variants name the kernels of the rounds they reproduce, and selection swaps the shipped op's
configuration. Not in CI's testpaths: `python -m pytest lab/tests`."""

from __future__ import annotations

import pytest
import torch

from lab.kernel_rules import RuleConfig
from lab.variants import variant_config
from suite.cuda.compile import compile_program
from suite.ops.fused_adaln.cuda import KernelConfig
from tests.test_adaln_kernels_cpu import WIDE_CASES

MAIN = '#include "adaln_fwd.cu"\n#include "adaln_bwd.cu"\n'
# the shipped op's wide cases: where a variant's registers, shared memory or spills bite
VARIANT_CASES = WIDE_CASES


def v(cfg: KernelConfig | RuleConfig, *names: str) -> RuleConfig:
    """cfg with the fields of each variant in turn."""
    for n in names:
        cfg = variant_config(cfg, n)
    return cfg


def _variant_names(combo, D, mode) -> list[str]:
    """Every kernel of every benchmark variant of one configuration: one NVRTC program."""
    from lab.kernel_variants import VARIANTS

    base = KernelConfig(*combo, D, mode)
    return sorted({n for name in VARIANTS for n in v(base, name).names()})


@pytest.mark.parametrize("combo,D,mode", VARIANT_CASES, ids=lambda v: str(v))
def test_nvrtc_variants_compile_without_spills(combo, D, mode):
    from suite.cuda.compile import read_sources, resources
    from suite.ops.fused_adaln.cuda import SOURCES

    names = _variant_names(combo, D, mode)
    prog = compile_program(MAIN, read_sources(SOURCES), names, "sm_90")
    res = resources(prog)
    if not res:  # a cache entry written without ptxas -v: recompile to get the report
        prog = compile_program(MAIN, read_sources(SOURCES), names, "sm_90", use_cache=False)
        res = resources(prog)
    assert set(res) == set(names), prog.log
    for name, r in res.items():
        assert (r["stack"], r["spill_stores"], r["spill_loads"]) == (0, 0, 0), (name, r)
        assert 0 < r["registers"] <= 255, (name, r)


def test_round9_backward_rules():
    """Round 9's defaults: fp32 dy beside 16-bit x at D = 5120 (one row of 320 threads) takes
    bwd-sm2's kernel; the dynamic-shared backward (bf16 dy there) sizes its carveout to 2 CTAs;
    bwd-r8 keeps round 8's kernels for the side-by-side measurement."""
    f32 = RuleConfig("bf16", "float", "float", 5120, 0)
    assert f32.bwd_sm2_on and f32.bwd(True, True) == v(f32, "bwd-sm2").bwd(True, True)
    assert f32.bwd_ctas == 2 and f32.bwd_sacc_on and not f32.bwd_prefetch
    old = v(f32, "bwd-r8")
    assert not old.bwd_sm2_on and old.bwd_prefetch and old.bwd_ctas == 1
    # not where it measured slower: D <= 3072 (several CTAs already), fp32 x, per token
    for other in (
        RuleConfig("bf16", "float", "float", 3072, 0),
        RuleConfig("float", "float", "float", 5120, 0),
        RuleConfig("bf16", "float", "float", 5120, 1),
        RuleConfig("bf16", "float", "bf16", 5120, 0),
    ):
        assert not other.bwd_sm2_on, other
    b16 = RuleConfig("bf16", "float", "bf16", 5120, 0)
    assert b16.bwd_dyn_on and b16.bwd_carveout(True) == 54
    assert v(b16, "bwd-r8").bwd_carveout(True) == 100
    assert v(b16, "bwd-r8").bwd(True, True) == b16.bwd(True, True)  # same kernel


def test_variant_selection_swaps_the_shipped_configuration():
    from lab import variants
    from suite.ops.fused_adaln import cuda as fused_cuda

    x, sc = torch.zeros(1, 2, 1536, dtype=torch.bfloat16), torch.zeros(1, 1536)
    shipped = KernelConfig("bf16", "float", "bf16", 1536, 0)
    prev = variants.set_variant("round1")
    try:
        cfg = fused_cuda.config_for(x, sc, 0, torch.bfloat16)
        assert cfg.fwd_pf is False and not cfg.bwd_pf and cfg.bwd_ept == 16
        assert variants.set_variant("default") == "round1"
        assert fused_cuda.config_for(x, sc, 0, torch.bfloat16) == shipped
        with pytest.raises(ValueError, match="unknown AdaLN kernel variant"):
            variants.set_variant("nope")
        with variants.use_variant("bwd-sm2"):
            assert variants.get_variant() == "bwd-sm2"
        assert variants.get_variant() == "default"
    finally:
        variants.set_variant(prev)
    assert fused_cuda.config_for(x, sc, 0, torch.bfloat16) == shipped


def test_occupancy_and_bytes_in_flight_model():
    from lab import kernel_model as km

    # the default bf16 forward at D = 1536: 56 registers, 192 threads -> 6 CTAs, 36 warps
    occ = km.occupancy(56, 192)
    assert (occ.ctas, occ.warps, occ.limit) == (6, 36, "registers")
    assert km.bytes_in_flight(occ, km.bytes_per_thread("fwd", 16, 8, 2, 2)) == 36 * 32 * 32
    assert km.occupancy(128, 192).warps == 12  # the default bf16 backward
    assert km.occupancy(16, 1024) == km.Occupancy(2, 64, "threads")
    assert km.occupancy(32, 64, smem=40 * 1024).limit == "smem"
    assert km.bytes_per_thread("fwd", 8, 8, 2, 2, rif=2) == 32
    assert km.bytes_per_thread("bwd", 16, 8, 2, 4) == 96
    assert km.predict_fraction(0.5, 100, 150) == 0.75
    assert km.predict_fraction(0.7, 100, 200) == km.CAP
    with pytest.raises(ValueError):
        km.bytes_per_thread("both", 16, 8, 2, 2)
