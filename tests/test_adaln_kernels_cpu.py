"""CPU tests of the fused AdaLN kernels without a GPU: every shipped configuration compiles
with NVRTC for sm_80 / sm_90 without spills, the configuration rules name the measured defaults,
and the launch helpers (occupancy, dynamic shared memory, partial-row layout) behave."""

from __future__ import annotations

import os
import re
from concurrent.futures import ProcessPoolExecutor

import pytest

from suite.cuda.compile import CompileError, compile_program, kernel_source_dir
from suite.ops.fused_adaln.cuda import KernelConfig, build

MAIN = '#include "adaln_fwd.cu"\n#include "adaln_bwd.cu"\n'

COMBOS = [("bf16", "float", "bf16"), ("float", "float", "float")]
OTHER = [
    ("bf16", "float", "float"),
    ("f16", "f16", "f16"),
    ("bf16", "bf16", "bf16"),
    ("f16", "float", "f16"),  # f16 x with fp32 modulation: round 14's words spilled 8 bytes there
]
CONFIGS = [
    (c, D, m) for c in COMBOS for D in (64, 1000, 1536, 4100, 5120, 8192) for m in (0, 1, 2)
] + [(c, D, m) for c in OTHER for D in (1536, 4100) for m in (0, 1, 2)]


def _compile_quietly(job) -> None:
    """One program into the on-disk cache; a failure is left for its own test to report."""
    kind, args = job
    try:
        build(KernelConfig(*args[0], *args[1:3]), args[3])
    except Exception:  # noqa: BLE001 - the test that builds it shows the error and its log
        pass


@pytest.fixture(scope="module", autouse=True)
def _compiled_in_parallel(request):
    """NVRTC compiles one program on one core, and the compile tests below build ~130 programs:
    the selected ones go into the on-disk cache first, one process per core (CI has 2), and the
    tests then read them (a cold cache took CI's test session from ~6.5 to ~11 minutes)."""
    jobs = []
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.originalname == "test_nvrtc_compiles_without_spills":
            jobs.append(("config", (params["combo"], params["D"], params["mode"], params["arch"])))
    workers = min(len(jobs), os.cpu_count() or 1)
    if workers > 1:
        with ProcessPoolExecutor(workers) as ex:
            list(ex.map(_compile_quietly, jobs))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("combo,D,mode", CONFIGS, ids=lambda v: str(v))
def test_nvrtc_compiles_without_spills(arch, combo, D, mode):
    cfg = KernelConfig(*combo, D, mode)
    prog = build(cfg, arch)
    assert prog.cubin and set(prog.names) == set(cfg.names())
    frames = re.findall(
        r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", prog.log
    )
    assert len(frames) >= len(cfg.names()), prog.log  # a resource report per kernel
    assert all(f == ("0", "0", "0") for f in frames), prog.log


WIDE_CASES = [
    (("bf16", "float", "bf16"), 1536, 0),
    (("bf16", "float", "float"), 5120, 0),
    (("bf16", "float", "float"), 1536, 0),
    (("bf16", "float", "float"), 3072, 0),
    (("float", "float", "float"), 3072, 0),
    (("bf16", "bf16", "bf16"), 1000, 1),
    (("bf16", "float", "bf16"), 1000, 0),  # round 7's shared multiplier must not overflow 48 KB
    (("bf16", "float", "bf16"), 3072, 0),
    (("bf16", "float", "bf16"), 5120, 0),  # bwd-dyn5: 96 registers under the 2-CTA cap
    (("f16", "f16", "f16"), 4100, 2),
    (("bf16", "float", "bf16"), 8192, 0),
]


def test_ptxas_resource_report_parser():
    from suite.cuda.compile import Program, resources

    log = (
        "ptxas info    : Function properties for _Z1kv\n"
        "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
        "ptxas info    : Used 96 registers, used 1 barriers, 8 bytes cumulative stack size, "
        "41040 bytes smem\n"
        "ptxas info    : Function properties for _Z1jv\n"
        "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 40 registers\n"
    )
    p = Program(b"x", {"k": "_Z1kv", "j": "_Z1jv", "gone": "_Z4gonev"}, log, "sm_90", "key")
    r = resources(p)
    assert r["k"] == dict(stack=8, spill_stores=4, spill_loads=12, registers=96, smem=41040)
    assert r["j"]["registers"] == 40 and r["j"]["smem"] == 0 and "gone" not in r


def test_compile_error_carries_log_and_cache_recovers(tmp_path, monkeypatch):
    monkeypatch.setenv("ADAPTIVELOAD_CUBIN_CACHE", str(tmp_path))
    with pytest.raises(CompileError, match="undefined_thing"):
        compile_program("__global__ void k() { undefined_thing(); }", {}, [], "sm_90")
    src = 'extern "C" __global__ void k(float* p) { p[threadIdx.x] = 1.f; }'
    p1 = compile_program(src, {}, ["k"], "sm_90")
    assert not p1.from_cache and compile_program(src, {}, ["k"], "sm_90").from_cache
    (tmp_path / f"{p1.key}.cubin").write_bytes(b"garbage")  # corrupt entry: recompiled
    p3 = compile_program(src, {}, ["k"], "sm_90")
    assert not p3.from_cache and p3.cubin == p1.cubin
    with pytest.raises(ValueError, match="real architecture"):
        compile_program(src, {}, ["k"], "compute_90")


def test_kernel_sources_found():
    assert (kernel_source_dir() / "adaln_fwd.cu").is_file()


def test_kernel_sources_have_no_generic_lambdas():
    # NVRTC 13.0 (the H200 image's) takes a generic lambda for a host function and refuses the
    # program; the NVRTC here accepts it (nox -s nvrtc_oldest compiles with 13.0; this is quicker)
    found = [
        f"{p.name}:{i}"
        for p in sorted(kernel_source_dir().glob("*.cu*"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\]\s*\([^)]*\bauto\b", line)
    ]
    assert not found, f"generic lambdas in kernel sources: {found}"


def test_d_too_large_is_a_clear_error():
    with pytest.raises(ValueError, match="D <= 8192"):
        build(KernelConfig("bf16", "float", "bf16", 16384, 0), "sm_90")


def test_occupancy_is_asked_once_per_function_and_block(monkeypatch):
    """Persistent launches size their grid by occupancy; the driver is asked once per (function,
    block), not on every launch (host path, docs/perf-notes.md)."""
    from cuda.bindings import driver

    from suite.cuda import launch

    calls = []

    def fake(func, threads, smem):
        calls.append((int(func), threads, smem))
        return driver.CUresult.CUDA_SUCCESS, 4

    monkeypatch.setattr(launch.driver, "cuOccupancyMaxActiveBlocksPerMultiprocessor", fake)
    launch.max_blocks_per_sm.cache_clear()
    try:
        f, g = driver.CUfunction(1234), driver.CUfunction(5678)
        assert [launch.max_blocks_per_sm(f, 192) for _ in range(3)] == [4, 4, 4]
        assert launch.max_blocks_per_sm(driver.CUfunction(1234), 192) == 4  # equal by value
        launch.max_blocks_per_sm(f, 320)
        launch.max_blocks_per_sm(g, 192)
        assert calls == [(1234, 192, 0), (1234, 320, 0), (5678, 192, 0)]
    finally:
        launch.max_blocks_per_sm.cache_clear()


def test_dynamic_shared_memory_set_once_per_function_size_and_carveout(monkeypatch):
    """bwd_dyn kernels: the function's dynamic shared memory limit is set to the launch's size
    (the driver refuses the launch otherwise) and its carveout preference, once per (function,
    size, carveout); another carveout for the same function sets it again, and switching back
    sets it back."""
    from cuda.bindings import driver

    from suite.cuda import launch

    calls = []

    def fake(func, attr, value):
        calls.append((int(func), attr.name[len("CU_FUNC_ATTRIBUTE_") :], value))
        return (driver.CUresult.CUDA_SUCCESS,)

    def both(fn, nbytes, carveout):
        return [
            (fn, "MAX_DYNAMIC_SHARED_SIZE_BYTES", nbytes),
            (fn, "PREFERRED_SHARED_MEMORY_CARVEOUT", carveout),
        ]

    monkeypatch.setattr(launch.driver, "cuFuncSetAttribute", fake)
    monkeypatch.setattr(launch, "_dynamic_smem", {})
    f, g = driver.CUfunction(11), driver.CUfunction(22)
    for _ in range(3):
        launch.use_dynamic_smem(f, 61440)
    # under 48 KB too: the default limit is 48 KB less the static shared memory, which
    # refused 48 KB beside the reductions' 128 bytes (D = 1000 on the H200, round 8)
    launch.use_dynamic_smem(g, 49152)
    launch.use_dynamic_smem(f, 61440, 54)
    launch.use_dynamic_smem(f, 61440, 54)
    launch.use_dynamic_smem(f, 61440)
    expected = both(11, 61440, 100) + both(22, 49152, 100) + both(11, 61440, 54)
    assert calls == expected + both(11, 61440, 100)


@pytest.mark.parametrize("combo,D,mode", WIDE_CASES, ids=lambda v: str(v))
def test_partial_rows_thread_major_layout_round_trips(combo, D, mode):
    """The fused backward stores column (c*RT + t)*VEC + j of its partial rows at position
    (c*VEC + j)*RT + t (coalesced); adaln_bwd_finalize_t's inverse must give every column < D
    exactly once and never read past the padded width (Python copy of both index formulas)."""
    cfg = KernelConfig(*combo, D, mode)
    rt, vec, P = cfg.bwd_rt, cfg.vec, cfg.bwd_part_width
    nch = -(-D // (vec * rt))
    stored = {}
    for c in range(nch):
        for t in range(rt):
            for j in range(vec):
                k = (c * vec + j) * rt + t
                assert k < P and k not in stored
                stored[k] = (c * rt + t) * vec + j
    assert len(stored) == P
    read = {}
    for s in range(P):  # finalize
        c, j, t = s // (vec * rt), s // rt % vec, s % rt
        d = (c * rt + t) * vec + j
        assert d == stored[s]
        if d < D:
            read[d] = s
    assert sorted(read) == list(range(D))


def test_dependent_launch_config(monkeypatch):
    """Round 23's finalize launch: cuLaunchKernelEx with programmatic stream serialization on the
    current stream, the grid and block given, the typed arguments passed through; one config per
    (grid, block, shared bytes, stream), built once; plain launches stay on cuLaunchKernel."""
    import ctypes

    from cuda.bindings import driver

    from suite.cuda import launch

    ex, plain = [], []
    monkeypatch.setattr(launch, "current_stream_handle", lambda index: 77)
    monkeypatch.setattr(
        launch.driver,
        "cuLaunchKernelEx",
        lambda cfg, f, params, extra: ex.append((cfg, params)) or (driver.CUresult.CUDA_SUCCESS,),
    )
    monkeypatch.setattr(
        launch.driver,
        "cuLaunchKernel",
        lambda *a: plain.append(a) or (driver.CUresult.CUDA_SUCCESS,),
    )
    launch._dependent_config.cache_clear()
    try:
        f = driver.CUfunction(1)
        args = [launch.i32(5), launch.f32(0.5)]
        for _ in range(2):
            launch.launch(f, (48, 2, 1), 1024, 0, args, dependent=True)
        launch.launch(f, (48, 2, 1), 1024, 0, args)
        assert len(ex) == 2 and len(plain) == 1 and ex[0][0] is ex[1][0]
        cfg, params = ex[0]
        assert (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ, cfg.blockDimX) == (48, 2, 1, 1024)
        assert int(cfg.hStream) == 77 and cfg.numAttrs == 1
        attr = cfg.attrs[0]
        assert (
            attr.id
            == driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        )
        assert attr.value.programmaticStreamSerializationAllowed == 1
        assert params == ((5, 0.5), (ctypes.c_int32, ctypes.c_float))
    finally:
        launch._dependent_config.cache_clear()


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_stream_convert_compiles_without_spills(arch):
    """kernels/stream_convert.cu (lab/mixed_copy.py's ceiling for the fp32-out forward's byte
    mix): every UNROLL, kind and loop compiles with NVRTC and keeps its words in registers."""
    import importlib.util
    from pathlib import Path

    from suite.cuda.compile import compile_program, read_sources, resources

    path = Path(__file__).resolve().parent.parent / "lab" / "mixed_copy.py"
    spec = importlib.util.spec_from_file_location("mixed_copy", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    src = read_sources(["stream_convert.cu"])
    prog = compile_program('#include "stream_convert.cu"\n', src, tool.STREAM_NAMES, arch)
    res = resources(prog)
    assert sorted(res) == sorted(tool.STREAM_NAMES)
    assert all(r["spill_stores"] == 0 and r["stack"] == 0 for r in res.values()), res
