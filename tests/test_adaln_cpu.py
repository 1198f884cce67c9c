"""CPU tests of the fused AdaLN op: the eager fallback's semantics against float64, the API's
errors, torch.compile, and NVRTC compilation of every kernel variant (no GPU needed)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from suite.cuda.compile import CompileError, compile_program, kernel_source_dir
from suite.ops import AdaLN, FusedLayerNorm, adaln, layer_norm_affine
from suite.ops.fused_cuda import KernelConfig, build

TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}  # relative L2 (METHOD.md)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def ref64(x, scale, shift, eps=1e-6, affine=False):
    """Independent float64 reference: F.layer_norm in float64, modulation broadcast by shape."""
    y = F.layer_norm(x.double(), (x.shape[-1],), eps=eps)
    s, h = scale.double(), shift.double()
    if affine:
        return y * s + h
    if s.dim() == 3 and s.shape[1] == 1 or s.dim() == 2:
        s, h = s.reshape(s.shape[0], 1, -1), h.reshape(h.shape[0], 1, -1)
    return y * (1 + s) + h


def make(B, N, D, dtype, mod_dtype, per_token=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(B, N, D, generator=g) * 2 + 0.5).to(dtype)
    shape = (B, N, D) if per_token else (B, D)
    scale = (torch.randn(shape, generator=g) * 0.5).to(mod_dtype)
    shift = torch.randn(shape, generator=g).to(mod_dtype)
    return x, scale, shift


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("per_token", [False, True])
@pytest.mark.parametrize("B,N,D", [(1, 1, 64), (2, 33, 1000), (3, 7, 1536), (1, 5, 4100)])
def test_forward_backward_vs_float64(dtype, per_token, B, N, D):
    x, scale, shift = make(B, N, D, dtype, torch.float32, per_token, seed=B * N + D)
    for t in (x, scale, shift):
        t.requires_grad_(True)
    for out_dtype in (None, torch.float32):
        y = adaln(x, scale, shift, out_dtype=out_dtype)
        assert y.dtype == (out_dtype or dtype) and y.shape == x.shape
        yr = ref64(x, scale, shift)
        assert rel(y, yr) < TOL[y.dtype]
        dy = torch.randn(y.shape, dtype=torch.float64).to(y.dtype)
        got = torch.autograd.grad(y, (x, scale, shift), dy)
        want = torch.autograd.grad(yr, (x, scale, shift), dy.double())
        for gg, ww in zip(got, want):
            assert gg.shape == ww.shape and gg.dtype in (dtype, torch.float32)
            assert rel(gg, ww) < max(TOL[dtype], 1e-4), (gg.dtype, rel(gg, ww))


def test_wan_strided_views_of_b6d():
    """Wan passes e[:, k:k+1, :] chunks of an fp32 [B, 6, D] tensor: no copy, right grads."""
    B, N, D = 2, 9, 256
    x = torch.randn(B, N, D, dtype=torch.bfloat16, requires_grad=True)
    e = torch.randn(B, 6, D, requires_grad=True)
    shift, scale = e[:, 0:1], e[:, 1:2]
    y = adaln(x, scale, shift, out_dtype=torch.float32)
    yr = ref64(x, scale, shift)
    assert rel(y, yr) < 1e-2
    dy = torch.randn_like(y)
    (ge,) = torch.autograd.grad(y, e, dy)
    (gr,) = torch.autograd.grad(yr, e, dy.double())
    assert rel(ge, gr) < 1e-4 and ge[:, 2:].abs().sum() == 0


def test_noncontiguous_x_and_b_gt_1_uses_each_samples_modulation():
    B, N, D = 3, 10, 128
    base = torch.randn(N, B, D)
    x = base.transpose(0, 1)  # [B, N, D], not contiguous
    scale, shift = torch.randn(B, D), torch.randn(B, D)
    y = adaln(x, scale, shift)
    assert rel(y, ref64(x, scale, shift)) < 1e-5
    y1 = adaln(x[1:2], scale[1:2], shift[1:2])
    torch.testing.assert_close(y[1:2], y1)


def test_affine_layer_norm_and_modules():
    B, N, D = 2, 6, 320
    x = torch.randn(B, N, D, requires_grad=True)
    w, b = torch.randn(D, requires_grad=True), torch.randn(D, requires_grad=True)
    y = layer_norm_affine(x, w, b)
    yr = ref64(x, w, b, affine=True)
    assert rel(y, yr) < 1e-5
    dy = torch.randn_like(y)
    for gg, ww in zip(
        torch.autograd.grad(y, (x, w, b), dy), torch.autograd.grad(yr, (x, w, b), dy.double())
    ):
        assert rel(gg, ww) < 1e-4
    m = FusedLayerNorm(D)
    assert rel(m(x), F.layer_norm(x.double(), (D,), eps=1e-6)) < 1e-5
    mod = AdaLN(D, out_dtype=torch.float32, backward="dtile")
    assert mod(x.bfloat16(), torch.zeros(B, D), torch.zeros(B, D)).dtype == torch.float32


def test_nan_inf_propagate_like_reference():
    x, scale, shift = make(2, 4, 64, torch.float32, torch.float32)
    x[0, 1, 3] = float("nan")
    x[1, 2, 5] = float("inf")
    y = adaln(x, scale, shift)
    yr = ref64(x, scale, shift)
    assert torch.equal(torch.isnan(y), torch.isnan(yr))
    assert torch.isfinite(y[0, 0]).all() and torch.isnan(y[0, 1]).all()


@pytest.mark.parametrize(
    "bad,match",
    [
        (lambda x, s, h: adaln(x[0], s, h), r"x must be \[B, N, D\]"),
        (lambda x, s, h: adaln(x.double(), s, h), "x must be float32"),
        (lambda x, s, h: adaln(x, s[:, :5], h), r"scale must be \[B, D\]"),
        (lambda x, s, h: adaln(x, s, h.half()), "same shape and dtype"),
        (lambda x, s, h: adaln(x, s, h, backward="atomic"), "backward must be one of"),
        (lambda x, s, h: layer_norm_affine(x, s, h), "weight and bias must both be"),
    ],
)
def test_clear_errors(bad, match):
    x, s, h = make(2, 3, 16, torch.float32, torch.float32)
    with pytest.raises((ValueError, TypeError), match=match):
        bad(x, s, h)


def test_torch_compile_fullgraph_cpu():
    x, s, h = make(2, 5, 64, torch.float32, torch.float32)
    x.requires_grad_(True)
    f = torch.compile(lambda x, s, h: adaln(x, s, h) * 2, fullgraph=True)
    y = f(x, s, h)
    torch.testing.assert_close(y, adaln(x, s, h) * 2)
    y.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_eager_calls_skip_the_custom_op_and_compile_traces_it(monkeypatch):
    """Eager calls take the autograd.Function (the custom-op dispatch cost ~50 us per call on the
    H200 host) with the same results and gradients as the custom op; torch.compile calls the op."""
    import importlib

    mod = importlib.import_module("suite.ops.adaln")  # the module (suite.ops.adaln is the function)

    x, s, h = make(2, 5, 64, torch.float32, torch.float32)

    def fresh():
        return [t.detach().clone().requires_grad_(True) for t in (x, s, h)]

    leaves = fresh()
    y_op = torch.ops.adaln.forward(*leaves, 1e-6, mod.MODE_SAMPLE, torch.float32, "fused")[0]
    g_op = torch.autograd.grad(y_op.square().sum(), leaves)

    def forbidden(*args):
        raise AssertionError("an eager call went through the custom op")

    monkeypatch.setattr(mod, "adaln_forward", forbidden)
    leaves = fresh()
    y = mod.adaln(*leaves)
    assert torch.equal(y, y_op)
    for g, w in zip(torch.autograd.grad(y.square().sum(), leaves), g_op):
        assert torch.equal(g, w)

    seen = []
    monkeypatch.setattr(
        mod, "adaln_forward", lambda *a: seen.append(a) or torch.ops.adaln.forward(*a)
    )
    torch._dynamo.reset()
    torch.compile(mod.adaln, fullgraph=True)(x, s, h)
    assert seen  # traced through the custom op


# ----------------------------------------------------------------------------- NVRTC (no GPU)
COMBOS = [("bf16", "float", "bf16"), ("float", "float", "float")]
OTHER = [("bf16", "float", "float"), ("f16", "f16", "f16"), ("bf16", "bf16", "bf16")]
VARIANTS = [
    (c, D, m) for c in COMBOS for D in (64, 1000, 1536, 4100, 5120, 8192) for m in (0, 1, 2)
] + [(c, D, m) for c in OTHER for D in (1536, 4100) for m in (0, 1, 2)]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("combo,D,mode", VARIANTS, ids=lambda v: str(v))
def test_nvrtc_compiles_without_spills(arch, combo, D, mode):
    cfg = KernelConfig(*combo, D, mode)
    prog = build(cfg, arch)
    assert prog.cubin and set(prog.names) == set(cfg.names())
    frames = re.findall(
        r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", prog.log
    )
    assert len(frames) >= len(cfg.names()), prog.log  # a resource report per kernel
    assert all(f == ("0", "0", "0") for f in frames), prog.log


# Benchmark variants (suite.ops.fused_cuda.VARIANTS): all of them in one NVRTC program per
# (dtypes, D, mode), so CI pays one compile (cached on disk) per case, not one per variant.
VARIANT_CASES = [
    (("bf16", "float", "bf16"), 1536, 0),
    (("bf16", "float", "float"), 5120, 0),
    (("float", "float", "float"), 3072, 0),
    (("bf16", "bf16", "bf16"), 1000, 1),
    (("bf16", "float", "bf16"), 1000, 0),  # round 7's shared multiplier must not overflow 48 KB
    (("bf16", "float", "bf16"), 3072, 0),
    (("bf16", "float", "bf16"), 5120, 0),  # bwd-dyn5: 96 registers under the 2-CTA cap
    (("f16", "f16", "f16"), 4100, 2),
    (("bf16", "float", "bf16"), 8192, 0),
]


@pytest.mark.parametrize("combo,D,mode", VARIANT_CASES, ids=lambda v: str(v))
def test_nvrtc_variants_compile_without_spills(combo, D, mode):
    from suite.cuda.compile import read_sources, resources
    from suite.ops.fused_cuda import SOURCES, VARIANTS

    base = KernelConfig(*combo, D, mode)
    names = sorted({n for v in VARIANTS for n in base.variant(v).names()})
    main = '#include "adaln_fwd.cu"\n#include "adaln_bwd.cu"\n'
    prog = compile_program(main, read_sources(SOURCES), names, "sm_90")
    res = resources(prog)
    if not res:  # a cache entry written without ptxas -v: recompile to get the report
        prog = compile_program(main, read_sources(SOURCES), names, "sm_90", use_cache=False)
        res = resources(prog)
    assert set(res) == set(names), prog.log
    for name, r in res.items():
        assert (r["stack"], r["spill_stores"], r["spill_loads"]) == (0, 0, 0), (name, r)
        assert 0 < r["registers"] <= 255, (name, r)


def test_default_kernels_are_the_measured_fastest():
    """The default fields name the fastest measured kernels (rounds 4 and 5): a prefetching forward
    for 16-bit y under a 64-register cap with 4 elements of x per load (a row per warp at
    D = 1536: 48 elements per thread under a 128-register cap), the one-CTA-per-row-block
    forward for fp32 y (CTA-wide barriers, same cap; 4 elements per load only with one row per
    CTA), a prefetching backward; "round1" names the first reference designs."""
    from suite.ops.fused_cuda import VARIANTS

    cfg = KernelConfig("bf16", "float", "bf16", 1536, 0)
    assert cfg.fwd(True) == "adaln_fwd_pf<bf16, float, bf16, 1536, 32, 8, 0, false, 2, 4>"
    assert cfg.fwd(False) == "adaln_fwd<bf16, float, bf16, 1536, 32, 8, 0, false, 0, 2>"
    ept16 = cfg.variant("fwd-ept16")  # the round-4 forward
    assert ept16.fwd(True) == "adaln_fwd_pf<bf16, float, bf16, 1536, 96, 2, 0, false, 5, 4>"
    assert ept16.fwd(False) == "adaln_fwd<bf16, float, bf16, 1536, 96, 2, 0, false, 0, 5>"
    assert cfg.variant("fwd-warp").fwd(True) == cfg.fwd(True)
    # two warps per row (D = 3072) measured slower: 16 elements per thread there
    wide = KernelConfig("bf16", "float", "bf16", 3072, 0)
    assert wide.fwd(True) == "adaln_fwd_pf<bf16, float, bf16, 3072, 192, 1, 0, false, 5, 4>"
    # round 7: column sums and multiplier in shared memory, 3 CTAs per SM (16-bit, D <= 3072)
    assert (
        cfg.bwd(True, True)
        == "adaln_bwd<bf16, float, bf16, 1536, 96, 2, 0, true, true, 3, true, true, true>"
    )
    assert cfg.bwd(False, True) == (
        "adaln_bwd<bf16, float, bf16, 1536, 96, 2, 0, false, true, 3, true, false, true>"
    )
    assert cfg.variant("default") == cfg and VARIANTS["default"] == {}
    assert (cfg.fwd_threads, cfg.bwd_threads, cfg.threads) == (256, 192, 192)
    f32 = KernelConfig("bf16", "float", "float", 1536, 0)
    assert f32.fwd(True) == "adaln_fwd<bf16, float, float, 1536, 96, 2, 0, true, 0, 5>"
    assert f32.variant("fwd-named").fwd(True).endswith("0, true, 0, 5, true>")
    assert f32.variant("fwd-v4").fwd(True).endswith("0, true, 4, 5>")
    f32w = KernelConfig("bf16", "float", "float", 3072, 0)
    assert f32w.fwd(True) == "adaln_fwd<bf16, float, float, 3072, 192, 1, 0, true, 4, 5>"
    # rows narrower than a warp keep 16-byte loads (unmeasured there; 4 spilled on sm_80)
    assert KernelConfig("bf16", "float", "bf16", 64, 0).fwd_vec == 8
    # fp32 x: 4 elements are already one 16-byte load, so the name carries no LV
    x32 = KernelConfig("float", "float", "float", 3072, 0)
    assert x32.fwd(True) == "adaln_fwd<float, float, float, 3072, 192, 1, 0, true, 0, 5>"
    r1 = cfg.variant("round1")
    assert r1.fwd(True) == "adaln_fwd<bf16, float, bf16, 1536, 96, 2, 0, true, 0, 5>"
    assert r1.bwd(True, True) == "adaln_bwd<bf16, float, bf16, 1536, 96, 2, 0, true, true>"
    assert cfg.variant("fwd-pfm").fwd(True).endswith("1536, 96, 2, 0, true, 1, 4>")  # no cap
    sm = cfg.variant("bwd-sm2")
    assert sm.bwd_sacc_on and sm.bwd(True, True).endswith("true, true, 2, true>")
    # past 320 threads per CTA no register cap (64 registers would spill)
    big = KernelConfig("bf16", "float", "bf16", 8192, 0)
    assert big.fwd(True) == "adaln_fwd_pf<bf16, float, bf16, 8192, 512, 1, 0, false, 1, 4>"
    # shared-memory column sums do not fit at D = 8192: that variant is round 1's kernel there
    big = KernelConfig("bf16", "float", "bf16", 8192, 0)
    assert big.variant("bwd-sm2").bwd(True, True) == big.variant("round1").bwd(True, True)


def test_variant_selection_env_and_setter(monkeypatch):
    import importlib

    from suite.ops import fused_cuda

    x, s = torch.zeros(1, 2, 1536, dtype=torch.bfloat16), torch.zeros(1, 1536)
    prev = fused_cuda.set_variant("round1")
    try:
        cfg = fused_cuda.config_for(x, s, 0, torch.bfloat16)
        assert cfg.fwd_pf is False and not cfg.bwd_pf and cfg.bwd_ept == 16
        assert fused_cuda.set_variant("default") == "round1"
        assert fused_cuda.config_for(x, s, 0, torch.bfloat16) == KernelConfig(
            "bf16", "float", "bf16", 1536, 0
        )
        with pytest.raises(ValueError, match="unknown AdaLN kernel variant"):
            fused_cuda.set_variant("nope")
    finally:
        fused_cuda.set_variant(prev)
    monkeypatch.setenv(fused_cuda.VARIANT_ENV, "bwd-sm2")
    try:
        mod = importlib.reload(fused_cuda)
        assert mod.get_variant() == "bwd-sm2"
    finally:
        monkeypatch.delenv(fused_cuda.VARIANT_ENV)
        importlib.reload(fused_cuda)
    assert fused_cuda.get_variant() == "default"


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


def test_occupancy_and_bytes_in_flight_model():
    from suite.ops import kernel_model as km

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


def test_d_too_large_is_a_clear_error():
    with pytest.raises(ValueError, match="D <= 8192"):
        build(KernelConfig("bf16", "float", "bf16", 16384, 0), "sm_90")


# ----------------------------------------------------------------------------- claims pipeline
REF = Path(__file__).resolve().parent.parent / "reports" / "reference" / "h200"


@pytest.mark.skipif(not (REF / "kernels.csv").is_file(), reason="no committed H200 reference run")
def test_claim_metrics_and_figures_from_committed_h200_run():
    import pandas as pd

    from suite.experiments import kernels, opmemory
    from suite.report.plots import kernels as pk
    from suite.report.plots import opmemory as po

    t = pd.read_csv(REF / "kernels.csv")
    assert set(kernels.REFERENCE_COLUMNS) <= set(t.columns)
    m = kernels.summarize({"kernels_timings": t})
    keys = {
        "fwd_speedup_wan",
        "fwd_speedup_eager",
        "fwd_speedup_compile_wan",
        "fwd_speedup_compile_eager",
        "bwd_dtile_speedup_wan",
        "bwd_fused_speedup_wan",
        "bwd_dtile_speedup_eager",
        "bwd_fused_speedup_compile_wan",
    }
    assert keys <= set(m.metric) and m.value.notna().all()
    tabs = {n: pd.read_csv(REF / f"{n}.csv") for n in ("opmemory_saved", "opmemory_kernels")}
    m2 = opmemory.summarize(tabs)
    assert {
        "saved_mem_reduction_wan",
        "saved_mem_reduction_eager",
        "saved_mem_gb_wan",
        "kernels_fused_fwd",
        "kernels_wan_fwd",
        "kernels_eager_fwd",
        "kernels_fused_bwd",
    } <= set(m2.metric)
    figs = pk.figures({"kernels_timings": t}, m) + po.figures(tabs, m2)
    assert [f[0] for f in figs] == [
        "kernels_bandwidth",
        "kernels_speedup",
        "opmemory_saved",
        "opmemory_kernels",
    ]
    # the committed grid has the same-size copy: every panel draws it; a table without it draws none
    labels = lambda fig: [ln.get_label() for ax in fig.axes for ln in ax.get_lines()]  # noqa: E731
    n_panels = len(figs[0][2].axes)
    assert labels(figs[0][2]).count("copy, same bytes") == n_panels
    old = pk.bandwidth_figure(t.drop(columns=["copy_same_gbps"]))
    assert "copy, same bytes" not in labels(old)


def test_inside_fsdp2_module_single_process():
    """The op inside an FSDP2 (fully_shard) module: forward and backward match the plain module."""
    import os
    import socket

    import torch.distributed as dist

    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        pytest.skip("torch.distributed.fsdp.fully_shard unavailable")
    if not dist.is_available() or dist.is_initialized():
        pytest.skip("torch.distributed unavailable or already initialized")

    class Block(torch.nn.Module):
        def __init__(self, D):
            super().__init__()
            self.mod = torch.nn.Parameter(torch.randn(1, 6, D) * 0.1)
            self.norm = AdaLN(D, out_dtype=torch.float32)
            self.lin = torch.nn.Linear(D, D)

        def forward(self, x, e):
            e = (self.mod + e).chunk(6, dim=1)  # Wan: [B, 1, D] views of a [B, 6, D] tensor
            return self.lin(self.norm(x, e[1], e[0]))

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        plain = Block(64)
        sharded = Block(64)
        sharded.load_state_dict(plain.state_dict())
        fully_shard(sharded)
        x, e = torch.randn(2, 10, 64), torch.randn(2, 6, 64)
        y1, y2 = plain(x, e), sharded(x, e)
        torch.testing.assert_close(y2, y1)
        y1.square().sum().backward()
        y2.square().sum().backward()
        torch.testing.assert_close(sharded.mod.grad.full_tensor(), plain.mod.grad)
    finally:
        dist.destroy_process_group()


# ----------------------------------------------------------------------------- timing harness (CPU)
def test_bytes_model_floors():
    from suite.experiments.kernels import bytes_model

    B, N, D = 1, 65536, 1536
    # perf-notes byte floors: fwd bf16 out 4 B/elem, fp32 out 6; bwd bf16 dy 6, fp32 dy 8
    assert bytes_model("fwd", B, N, D, 2, 2) == 4 * B * N * D + 2 * B * D * 4 + 8 * B * N
    assert bytes_model("fwd", B, N, D, 2, 4) - bytes_model("fwd", B, N, D, 2, 2) == 2 * N * D
    assert bytes_model("bwd", B, N, D, 2, 2) == 6 * N * D + 8 * N + 4 * D * 4
    assert bytes_model("bwd", 2, N, D, 2, 4) == 2 * (8 * N * D + 8 * N + 4 * D * 4)


def test_spin_covers_host_time():
    from suite.ops.bench import spin_cycles

    cpm = 2.0e6  # cycles per ms
    assert spin_cycles(0.1, cpm, 2_000_000) == 2_000_000  # the minimum (1 ms) covers 0.1 ms
    assert spin_cycles(0.6, cpm, 2_000_000) == int(2 * 0.6 * cpm)  # 2x a 0.6 ms backward
    assert spin_cycles(0.6, cpm, 2_000_000, margin=3.0) == int(3 * 0.6 * cpm)
    assert spin_cycles(1e4, cpm, 2_000_000) == int(20 * cpm)  # capped at 20 ms
    assert spin_cycles(-1.0, cpm, 0) == 0


def test_timer_rejects_an_unknown_flush_before_touching_the_gpu():
    from suite.ops.bench import Timer

    with pytest.raises(ValueError, match="flush='clean'"):
        Timer(3, flush="clean")


def test_summary_row_counts_host_bound_reps():
    from suite.ops.bench import summary_row

    key = dict(impl="fused", op="bwd", B=1, N=4096, D=1536, dtype="bfloat16", out_dtype="bfloat16")
    ms = [0.010, 0.012, 0.011, 0.013, 0.5]
    r = summary_row(key, ms, 10**7, 4000.0, "", spin_ms=1.0, host_ms=[0.5, 0.6, 1.2, 0.4, 2.0])
    assert r["ms_median"] == 0.012 and r["reps"] == 5 and r["host_bound_reps"] == 2
    assert abs(r["gbps"] - 1e7 / 0.012e-3 / 1e9) < 1e-6
    assert abs(r["pct_copy_bw"] - 100 * r["gbps"] / 4000.0) < 1e-9
    assert r["ms_p25"] <= r["ms_median"] <= r["ms_p75"] and r["host_ms_median"] == 0.6
    assert set(key) <= set(r) and r["spin_ms"] == 1.0
    r1 = summary_row(key, [0.02], 10**6, 4000.0, copy_same_gbps=100.0)
    assert r1["ms_p25"] == r1["ms_p75"] == 0.02 and r1["host_bound_reps"] == 0
    # 10**6 B in 0.02 ms = 50 GB/s: half of a same-size copy at 100; no copy given -> NaN
    assert abs(r1["pct_copy_same"] - 50.0) < 1e-9 and math.isnan(r["pct_copy_same"])


def test_variant_impls_and_table():
    from suite.ops.bench import summary_row, variant_impls, variant_table

    # a known variant counts for the ops whose fields it sets (round1: both), others by prefix
    for op in ("fwd", "bwd"):
        assert variant_impls(op, ["default", "round1"])[1] == "fused@round1"
    vs = ["default", "fwd-r2", "fwd-e8", "bwd-sm2"]
    assert variant_impls("fwd", vs) == [
        "fused",
        "fused@fwd-r2",
        "fused@fwd-e8",
        "fused-f32out",
        "fused-f32out@fwd-r2",
        "fused-f32out@fwd-e8",
    ]
    assert variant_impls("bwd", vs) == [
        "fused",
        "fused@bwd-sm2",
        "fused-f32out",
        "fused-f32out@bwd-sm2",
    ]

    def row(impl, op, ms, out="bfloat16", hb=()):
        key = dict(impl=impl, op=op, B=1, N=65536, D=1536, dtype="bfloat16", out_dtype=out)
        return summary_row(key, [ms], 10**8, 4000.0, spin_ms=1.0, host_ms=hb or [0.1])

    rows = [
        row("fused", "fwd", 0.10),
        row("fused@fwd-r2", "fwd", 0.08),
        row("fused@fwd-e8", "fwd", 0.12, hb=[3.0]),
        row("eager", "fwd", 0.50),
        row("compile-eager", "fwd", 0.20),
        row("fused-f32out", "fwd", 0.15, "float32"),
        row("fused-f32out@fwd-r2", "fwd", 0.12, "float32"),
        row("wan-eager", "fwd", 1.50, "float32"),
        row("compile-wan", "fwd", 0.30, "float32"),
        row("fused-dtile", "bwd", 0.40),
        row("fused", "bwd", 0.20),
        row("fused@bwd-sm2", "bwd", 0.25),
    ]
    # fp32 x: fused and fused-f32out are both fp32 out (the H200 run of 2026-12-01 crashed here)
    f32x = [
        dict(r, dtype="float32", out_dtype="float32")
        for r in rows
        if r["impl"] in ("fused", "fused-f32out", "fused@fwd-r2", "fused-f32out@fwd-r2")
        and r["op"] == "fwd"
    ]
    t32 = variant_table(f32x)
    assert len(t32) == 1 and t32.iloc[0]["default"] == f32x[0]["pct_copy_bw"]
    t = variant_table(rows).set_index(["op", "out_dtype"])
    bf = t.loc[("fwd", "bfloat16")]
    assert bf["best"] == "fwd-r2" and bf["best_x_default"] == 1.25
    assert bf["x_eager"] == 6.25 and bf["x_compile-eager"] == 2.5
    assert bf["fwd-r2"] == round(100 * (1e8 / 0.08e-3 / 1e9) / 4000.0, 1)
    assert bf["host_bound_reps"] == 1  # fwd-e8's one repetition past the spin
    f32 = t.loc[("fwd", "float32")]
    assert f32["best"] == "fwd-r2" and f32["x_wan-eager"] == 12.5 and f32["x_compile-wan"] == 2.5
    bw = t.loc[("bwd", "bfloat16")]  # dtile rows are not variants; the default stays best here
    assert bw["best"] == "default" and bw["best_x_default"] == 1.0 and len(t) == 3


def test_bench_impl_selects_variant_per_call():
    from suite.ops import fused_cuda
    from suite.ops.bench import _impl

    x, e = torch.randn(1, 4, 64), torch.randn(1, 6, 64)
    prev = fused_cuda.get_variant()
    try:
        y = _impl("fused@fwd-pfm")(x, e)
        assert fused_cuda.get_variant() == "fwd-pfm"
        torch.testing.assert_close(y, _impl("fused")(x, e))
        assert fused_cuda.get_variant() == fused_cuda.ENV_VARIANT
        assert _impl("fused-f32out@bwd-sm2")(x.bfloat16(), e).dtype == torch.float32
    finally:
        fused_cuda.set_variant(prev)


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


def test_dynamic_shared_memory_opt_in_once_per_function_and_size(monkeypatch):
    """bwd_dyn kernels: past 48 KB of dynamic shared memory the function opts in (the driver
    refuses the launch otherwise) and its carveout goes to shared memory, once per (function,
    size)."""
    from cuda.bindings import driver

    from suite.cuda import launch

    calls = []

    def fake(func, attr, value):
        calls.append((int(func), attr.name, value))
        return (driver.CUresult.CUDA_SUCCESS,)

    monkeypatch.setattr(launch.driver, "cuFuncSetAttribute", fake)
    launch.use_dynamic_smem.cache_clear()
    try:
        f, g = driver.CUfunction(11), driver.CUfunction(22)
        for _ in range(3):
            launch.use_dynamic_smem(f, 61440)
        launch.use_dynamic_smem(g, 20480)  # under 48 KB: no opt-in needed
        assert calls == [
            (11, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 61440),
            (11, "CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT", 100),
            (22, "CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT", 100),
        ]
    finally:
        launch.use_dynamic_smem.cache_clear()


@pytest.mark.parametrize("combo,D,mode", VARIANT_CASES, ids=lambda v: str(v))
def test_partial_rows_thread_major_layout_round_trips(combo, D, mode):
    """The fused backward stores column (c*RT + t)*VEC + j of its partial rows at position
    (c*VEC + j)*RT + t (coalesced); adaln_bwd_finalize's inverse must give every column < D
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
