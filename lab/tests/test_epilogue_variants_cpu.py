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
        "bf16",
        "bf16",
        1536,
        base.flags,
        True,
        defines=("EP_MINB=1", "EP_BWD_PF=0", "EP_BWD_SMEM=0", "EP_BWD_SUMS=0"),
    )
    assert ec.build(base, "sm_90").cubin == ec.build(spelled, "sm_90").cubin


def test_candidates_table():
    assert list(ev.CANDIDATES)[0] == "shipped"
    base = ec.EpilogueConfig("bf16", "bf16", 5120, ev.OPS["rms_norm"], True)
    for p in ev.PASSES:
        assert ev.CANDIDATES["shipped"](base, p) == ec.tuned(base, p)
        assert ev.CANDIDATES["rt/2"](base, p).threads == 320
    # a one-pass variant runs the shipped kernels in the other pass, and is timed in its own only
    assert ev.CANDIDATES["bwd-lb2"](base, "bwd").defines == ("EP_MINB=2",)
    assert ev.CANDIDATES["bwd-lb2"](base, "fwd") == ec.tuned(base, "fwd")
    assert ev.timed_passes("bwd-pf-lb2") == ("bwd",) and ev.timed_passes("shipped") == ev.PASSES
    for op in ev.OPS:
        for D in ev.WIDTHS:
            for c in ev.CANDIDATES:
                assert all(ev.CANDIDATES[c](ev._base(op, D), p) in CONFIGS for p in ev.PASSES)
    with pytest.raises(SystemExit):
        ev.main(["--only", "nope", "--out", "/tmp/x"])


def test_kernel_facts_of_a_candidate():
    """Registers and spills from the ptxas report, CTAs per SM from the occupancy query (stubbed
    here: 2)."""
    from lab.ops import host_bench

    cfg = ev.CANDIDATES["bwd-lb2"](
        ec.EpilogueConfig("bf16", "bf16", 3072, ev.OPS["residual_norm"], True), "bwd"
    )
    with host_bench.stub_launches():
        facts = ev._kernel_facts({p: cfg for p in ev.PASSES})
    assert set(facts) == {"fwd", "bwd"}
    for f in facts.values():
        assert 0 < f["registers"] <= 65536 // (2 * cfg.threads) and f["ctas_per_sm"] == 2
        assert f["spill_bytes"] == 0 and f["smem_bytes"] > 0


def test_run_writes_a_row_per_candidate_and_timed_pass(tmp_path, monkeypatch):
    """The whole grid through the op's host path on CPU tensors (launches stubbed; timings and
    the copy faked): one CSV row per (op, timed pass, D, N, candidate), none of them failed."""
    import types

    import torch

    from lab.ops import epilogue_bench as eb
    from lab.ops import host_bench

    real_randn, real_gen = torch.randn, torch.Generator
    monkeypatch.setattr(torch, "randn", lambda *a, device=None, **k: real_randn(*a, **k))
    monkeypatch.setattr(torch, "Generator", lambda device=None: real_gen())
    monkeypatch.setattr(eb, "timed", lambda fn, reps: [fn() and 1.0 for _ in range(3)])
    monkeypatch.setattr(eb, "copy_ms", lambda nbytes, reps: 0.5)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(name="x")
    )
    with host_bench.stub_launches():
        rows = ev.run(list(ev.CANDIDATES), [40], 20, tmp_path)
    want = sum(len(ev.timed_passes(c)) for c in ev.CANDIDATES) * len(ev.OPS) * len(ev.WIDTHS)
    assert len(rows) == want
    assert all(r["note"] == "" and r["pct_copy"] == 50.0 for r in rows)
    assert "bwd-pf-lb1" in ev.table(tmp_path / "epilogue_variants.csv")
