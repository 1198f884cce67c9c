"""CPU tests of the fused epilogues' lab candidates (lab/epilogue_variants.py): every candidate
configuration compiles with NVRTC for sm_90 and can launch (registers x threads fit an SM; the
ptxas report of each is printed for perf-notes); the shipped configuration is not a candidate's
(the -D switches' defaults are the shipped kernels: the same CUBIN with and without them)."""

from __future__ import annotations

import pytest

from lab import epilogue_variants as ev
from suite.cuda.compile import resources
from suite.ops.epilogue import cuda as ec

CONFIGS = ev.configs()


@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
def test_candidate_compiles_and_fits_an_sm(cfg):
    prog = ec.build(cfg, "sm_90")
    res = resources(prog)
    if set(res) != set(cfg.names()):  # a cache entry without the ptxas report: recompile
        res = resources(ec.build(cfg, "sm_90", use_cache=False))
    assert set(res) == set(cfg.names()), prog.log
    for name, r in res.items():
        threads = 128 if name == "epilogue_finalize" else cfg.threads
        assert 0 < r["registers"] * threads <= 65536, (name, r, threads)
        print(cfg.D, cfg.flags, cfg.threads, cfg.defines, name.split("<")[0], r)


def test_default_switches_are_the_shipped_kernels():
    base = ec.EpilogueConfig("bf16", "bf16", 1536, ev.OPS["residual_norm"], True)
    spelled = ec.EpilogueConfig(
        "bf16", "bf16", 1536, base.flags, True,
        defines=("EP_MINB=1", "EP_FWD_MINB=2", "EP_FWD_PACKED=1", "EP_ONEPASS=0", "EP_BWD_EARLY=0"),
    )  # fmt: skip
    assert ec.build(base, "sm_90").cubin == ec.build(spelled, "sm_90").cubin


def test_candidates_table():
    assert list(ev.CANDIDATES)[0] == "shipped"
    base = ec.EpilogueConfig("bf16", "bf16", 5120, ev.OPS["rms_norm"], True)
    assert ev.CANDIDATES["shipped"](base) == base
    assert ev.CANDIDATES["rt/2"](base).threads == 320
    assert ev.CANDIDATES["bwd-lb2"](base).defines == ("EP_MINB=2",)
    assert len(CONFIGS) == len(ev.OPS) * len(ev.WIDTHS) * len(ev.CANDIDATES)
    with pytest.raises(SystemExit):
        ev.main(["--only", "nope", "--out", "/tmp/x"])


def test_kernel_facts_of_a_candidate():
    """Registers and spills from the ptxas report, CTAs per SM from the occupancy query (stubbed
    here: 2)."""
    from lab.ops import host_bench

    cfg = ev.CANDIDATES["bwd-lb2"](
        ec.EpilogueConfig("bf16", "bf16", 3072, ev.OPS["residual_norm"], True)
    )
    with host_bench.stub_launches():
        facts = ev._kernel_facts(cfg)
    assert set(facts) == {"fwd", "bwd"}
    for f in facts.values():
        assert 0 < f["registers"] <= 65536 // (2 * cfg.threads) and f["ctas_per_sm"] == 2
        assert f["spill_bytes"] == 0
