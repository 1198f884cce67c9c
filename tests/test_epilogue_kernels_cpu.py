"""CPU tests of the fused epilogue kernels without a GPU: every shipped configuration (Wan's
widths and a generic one, bf16 and fp32 x, each operand set) compiles with NVRTC for sm_80 and
sm_90, stays in registers (no spills) and can launch (registers x threads fit an SM); the launch
configuration rules hold."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

import pytest

from suite.cuda.compile import resources
from suite.ops.epilogue import cuda as ec

ARCHS = ("sm_80", "sm_90")
CONFIGS = ec.shipped_configs()


def _build_quietly(job) -> None:
    try:
        ec.build(*job)
    except Exception:  # noqa: BLE001 - the test that builds it reports the error and its log
        pass


@pytest.fixture(scope="module", autouse=True)
def _compiled_in_parallel():
    """NVRTC compiles one program per core: fill the on-disk cache two at a time first."""
    jobs = [(c, a) for a in ARCHS for c in CONFIGS]
    with ProcessPoolExecutor(2) as ex:
        list(ex.map(_build_quietly, jobs))


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("cfg", CONFIGS, ids=str)
def test_shipped_configs_compile_without_spills(cfg, arch):
    prog = ec.build(cfg, arch)
    res = resources(prog)
    if set(res) != set(cfg.names()):  # a cache entry without the ptxas report: recompile
        prog = ec.build(cfg, arch, use_cache=False)
        res = resources(prog)
    assert set(res) == set(cfg.names()), prog.log
    for name, r in res.items():
        assert (r["stack"], r["spill_stores"], r["spill_loads"]) == (0, 0, 0), (name, r)
        threads = 128 if name == "epilogue_finalize" else cfg.threads
        assert 0 < r["registers"] * threads <= 65536, (name, r, threads)  # launchable


def test_threads_per_row_rule():
    """8 elements per thread in whole warps; 16 once a row would need more than 1024 threads."""
    cases = {
        ("bf16", 1536): 192,
        ("bf16", 3072): 384,
        ("bf16", 5120): 640,
        ("float", 1536): 192,
        ("float", 5120): 640,
        ("bf16", 1001): 128,
        ("bf16", 8): 32,
        ("bf16", 8192): 1024,
        ("float", 8192): 1024,
    }
    for (tx, D), threads in cases.items():
        cfg = ec.EpilogueConfig(tx, tx, D, ec.WAN_FLAGS["gate+mod"], True)
        assert cfg.threads == threads, (tx, D, cfg.threads)
        assert cfg.threads * max(1, ec.ELEMS // cfg.vec) * cfg.vec >= D


def test_slots_follow_the_operands():
    f = ec.WAN_FLAGS
    slots = {k: ec.EpilogueConfig("bf16", "bf16", 64, v, True).slots for k, v in f.items()}
    assert slots["gate+mod"] == ("gate", "scale", "shift")
    assert slots["affine"] == ("gate", "weight", "bias")
    assert slots["plain+mod"] == ("scale", "shift")
    assert slots["tok"] == ()  # per-token gradients are written per element, not summed
    assert slots["rms"] == ("weight",)
    every = ec.EpilogueConfig("bf16", "bf16", 64, ec.ALL_FLAGS, True).slots
    assert every == ("gate", "scale", "shift", "weight", "bias")


def test_rows_per_cta_cover_every_row():
    for N, B, wave in [(1, 1, 264), (7, 3, 264), (4096, 1, 264), (75600, 2, 132), (9, 8, 8)]:
        rpc = ec._rows_per_cta(N, B, wave)
        chunks = -(-N // rpc)
        assert rpc >= 1 and chunks * rpc >= N and (chunks - 1) * rpc < N
        assert rpc >= min(N, ec.MIN_ROWS_PER_CTA)


def test_d_too_large_is_a_clear_error():
    with pytest.raises(ValueError, match="D <= 8192"):
        ec.build(ec.EpilogueConfig("bf16", "bf16", 8200, ec.WAN_FLAGS["rms"], True), "sm_90")


def test_shipped_table_picks_a_variant_per_pass(monkeypatch):
    """A SHIPPED line changes that pass's kernels alone, and the compile test then covers it."""
    for (tx, flags, pass_, D), name in ec.SHIPPED.items():
        assert name in ec.VARIANTS and pass_ in ec.VARIANTS[name].passes, (tx, flags, pass_, D)
    gm = ec.WAN_FLAGS["gate+mod"]
    monkeypatch.setitem(ec.SHIPPED, ("bf16", gm, "bwd", 3072), "bwd-pf-lb1")
    cfg = ec.EpilogueConfig("bf16", "bf16", 3072, gm, True)
    assert ec.tuned(cfg, "fwd") == cfg
    assert ec.tuned(cfg, "bwd").defines == ("EP_BWD_PF=1", "EP_BWD_SMEM=1", "EP_MINB=1")
    assert ec.tuned(cfg, "bwd") in ec.shipped_configs()
    assert ec.tuned(ec.EpilogueConfig("float", "float", 3072, gm, True), "bwd").defines == ()


def test_only_what_the_table_selects_ships():
    """cuda.VARIANTS holds the variants SHIPPED selects, and the kernels' -D switches are the ones
    those variants set (the lab's other candidates and their switches live in lab/)."""
    import re

    from suite.cuda.compile import kernel_source_dir

    assert set(ec.VARIANTS) == set(ec.SHIPPED.values())
    set_by_table = {d.split("=")[0] for v in ec.VARIANTS.values() for d in v.defines}
    sources = "".join((kernel_source_dir() / f).read_text() for f in ec.SOURCES)
    switches = set(re.findall(r"#ifndef (EP_\w+)", sources))
    assert switches == set_by_table, (switches, set_by_table)
