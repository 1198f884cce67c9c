"""The CUDA side of the fused epilogues (kernels/epilogue_*.cu): launch configurations, NVRTC
programs and launches.

One NVRTC program per `EpilogueConfig` (x dtype, output dtype, D, operand flags, vector or
scalar loads) holds its forward, backward and the finalize of the column sums; a model compiles
a handful of them once (the CUBINs are cached on disk across processes).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import torch

from suite.cuda.build import OpKernels, check_rows

SOURCES = ("adaln_common.cuh", "epilogue_common.cuh", "epilogue_fwd.cu", "epilogue_bwd.cu")
MAIN = '#include "epilogue_fwd.cu"\n#include "epilogue_bwd.cu"\n'
CTYPE = {torch.float32: "float", torch.bfloat16: "bf16"}
MAX_D = 8192  # RT <= 1024 threads x 8 elements: the row stays in registers

# Operand flags (kernels/epilogue_common.cuh): which operands a call has, compile-time.
GATE, GATE_TOK, MOD, MOD_TOK, WEIGHT, BIAS, RESID, RMS = (1 << i for i in range(8))
ELEMS = 8  # elements of the row per thread (registers: one 16-byte load of bf16 x)
MAX_THREADS = 1024
MIN_ROWS_PER_CTA = 8  # backward: partial rows stay small beside x and dy


@dataclass(frozen=True)
class EpilogueConfig:
    """One compiled configuration. tx/to: C types of x and of the normalised output."""

    tx: str
    to: str
    D: int
    flags: int
    vector: bool
    rt: int = 0  # threads per row; 0: the rule (`threads`). A variant sets it.
    defines: tuple[str, ...] = ()  # a variant's -D switches of epilogue_common.cuh

    @property
    def vec(self) -> int:
        return 16 // (4 if self.tx == "float" else 2)

    @property
    def threads(self) -> int:
        """Threads per row (one row per CTA at a time): ELEMS elements each in whole warps, or
        twice that past MAX_THREADS threads. (16 elements per thread at D = 5120 took 168
        registers in the backward: one CTA of 10 warps per SM, against 20 warps with 8.)"""
        if self.rt:
            return self.rt
        vecs = -(-self.D // self.vec)
        per_thread = max(1, ELEMS // self.vec)
        while -(-vecs // per_thread) > MAX_THREADS:
            per_thread *= 2
        return 32 * -(-vecs // (32 * per_thread))

    def _targs(self) -> str:
        v = "true" if self.vector else "false"
        return f"{self.tx}, {self.to}, {self.D}, {self.threads}, {self.flags}, {v}"

    def fwd(self) -> str:
        return f"epilogue_fwd<{self._targs()}>"

    def bwd(self) -> str:
        return f"epilogue_bwd<{self._targs()}>"

    def names(self) -> list[str]:
        return [self.fwd(), self.bwd(), "epilogue_finalize"]

    @property
    def slots(self) -> tuple[str, ...]:
        """The column sums the backward reduces, in the kernel's slot order."""
        f = self.flags
        out = ["gate"] if f & GATE and not f & GATE_TOK else []
        out += ["scale", "shift"] if f & MOD and not f & MOD_TOK else []
        out += ["weight"] if f & WEIGHT else []
        return tuple(out + (["bias"] if f & BIAS else []))


# The configurations the ops ship (the CPU compile test builds each for sm_80 and sm_90): Wan's
# three epilogues (the FFN's gated residual into the next norm1 + modulation, attn1's gated
# residual into the affine norm2, attn2's plain residual into norm3 + modulation), Wan 2.2's
# per-token modulation and the qk RMSNorm, at Wan's widths and two generic ones (1000: vector
# loads; 1001: scalar), bf16 and fp32 x.
WAN_FLAGS = {
    "gate+mod": RESID | GATE | MOD,
    "affine": RESID | GATE | WEIGHT | BIAS,  # attn1's gated residual into norm2
    "plain+mod": RESID | MOD,
    "tok": RESID | GATE | GATE_TOK | MOD | MOD_TOK,
    "rms": RMS | WEIGHT,
}
# Every operand at once (gate, modulation and affine): correct, not in Wan's block, and its
# backward spills at D = 5120 (640 threads leave ptxas 96 registers for five column sums).
ALL_FLAGS = RESID | GATE | MOD | WEIGHT | BIAS


@dataclass(frozen=True)
class Variant:
    """A kernel variant: threads per row and -D switches of kernels/epilogue_common.cuh (their
    defaults are the rule's kernels). lab/epilogue_variants.py times each beside the shipped ones."""

    defines: tuple[str, ...] = ()
    half_rt: bool = False  # half the rule's threads per row: two 16-byte chunks each
    same_bits: bool = True  # outputs bitwise the rule's: the same arithmetic in the same order
    passes: tuple[str, ...] = ("fwd", "bwd")  # the passes whose kernels it changes

    def apply(self, cfg: EpilogueConfig) -> EpilogueConfig:
        rt = max(32, 32 * -(-cfg.threads // 64)) if self.half_rt else cfg.rt
        return replace(cfg, rt=rt, defines=self.defines)


def prefetch_bwd(minb: int, sums: bool = False) -> Variant:
    """The backward with the next row prefetched (packed) and the per-sample operand rows in
    shared memory (sums: the column sums there too, first), __launch_bounds__ for `minb` CTAs
    per SM; each parked set only where it fits 47 KB. Loading d_x_new early moves
    residual_norm's dx by up to 1 bf16 ulp against the rule's kernels: not the same bits."""
    parked = ("EP_BWD_SMEM=1", "EP_BWD_SUMS=1") if sums else ("EP_BWD_SMEM=1",)
    return Variant(("EP_BWD_PF=1", *parked, f"EP_MINB={minb}"), same_bits=False, passes=("bwd",))


# The variants the launch table selects (the lab's other candidates: lab/epilogue_variants.py).
VARIANTS = {
    "rt/2": Variant(half_rt=True, same_bits=False),  # other partial sums per thread
    **{f"bwd-pf-lb{m}": prefetch_bwd(m) for m in (1, 2, 3)},
    "bwd-pfs-lb2": prefetch_bwd(2, sums=True),
}

# The variant a call runs, by (x type, operand flags, pass, D); absent: the rule's kernels. A line
# lands here only after lab/epilogue_variants.py measured it faster on a GPU and the GPU tests
# passed with it; shipped_configs() (the CPU compile and spill test) covers every line.
_GM, _RMS = RESID | GATE | MOD, RMS | WEIGHT  # Wan's residual_norm and rms_norm
# % of a copy of the byte floor, rule -> shipped: H100 (reports/reference/h100/epilogue-3abb1f2)
# at N = 65,536 / 75,600; H200 (reports/reference/h200/ops-a14fc79/variants) at 75,600. One table
# for both: the H200 needs ~1.4x the bytes in flight per SM, so the backward takes the CTA per SM
# that fits without spilling; on the H100 that line reads within ~4 points of its best. Wan's
# other flag sets keep the rule's kernels (not timed).
SHIPPED: dict[tuple[str, int, str, int], str] = {
    ("bf16", _GM, "bwd", 1536): "bwd-pf-lb3",  # H100 61 -> 87 / 86; H200 83 (pf-lb1) -> 91
    ("bf16", _GM, "bwd", 3072): "bwd-pfs-lb2",  # H100 66 -> 91 / 92; H200 85 (pf-lb1) -> 93
    ("bf16", _GM, "bwd", 5120): "bwd-pf-lb1",  # H100 80 -> 93; H200 95
    ("bf16", _RMS, "bwd", 1536): "bwd-pf-lb1",  # H100 77 / 78 -> 83 / 85; H200 82 (bytes in flight)
    ("bf16", _RMS, "bwd", 3072): "bwd-pf-lb3",  # H100 81 / 79 -> 86 / 88; H200 84 (pf-lb1) -> 91
    ("bf16", _RMS, "bwd", 5120): "bwd-pf-lb2",  # H100 73 / 72 -> 87 / 88; H200 82 (lb2) -> 92
    ("bf16", _GM, "fwd", 5120): "rt/2",  # H100 92 -> 92 / 93; H200 (728903d) 81 -> 89
    ("bf16", _RMS, "fwd", 5120): "rt/2",  # H100 80 / 78 -> 94 / 93; H200 69 -> 85
}


def tuned(cfg: EpilogueConfig, pass_: str) -> EpilogueConfig:
    """The configuration pass_ ("fwd" or "bwd") of a call with rule configuration cfg runs."""
    name = SHIPPED.get((cfg.tx, cfg.flags, pass_, cfg.D))
    return VARIANTS[name].apply(cfg) if name else cfg


def shipped_configs() -> list[EpilogueConfig]:
    out = []
    for tx in ("bf16", "float"):
        for D in (1536, 3072, 5120, 1000, 1001):
            for flags in WAN_FLAGS.values():
                cfg = EpilogueConfig(tx, tx, D, flags, D % (16 // _size(tx)) == 0)
                out += [cfg, tuned(cfg, "fwd"), tuned(cfg, "bwd")]
    return list(dict.fromkeys(out))


def _size(ctype: str) -> int:
    return 4 if ctype == "float" else 2


KERNELS = OpKernels("fused epilogue", SOURCES, MAIN, MAX_D)
check_d, build, prebuild = KERNELS.check_d, KERNELS.build, KERNELS.prebuild
_fn = KERNELS.function  # (cfg, kernel name, device index) -> CUfunction, looked up once


@functools.cache
def _ctas_per_wave(cfg: EpilogueConfig, name: str, index: int) -> int:
    """Resident CTAs of kernel `name` on the whole device (occupancy API, asked once)."""
    from suite.cuda.launch import max_blocks_per_sm, sm_count

    return sm_count(index) * max(1, max_blocks_per_sm(_fn(cfg, name, index), cfg.threads))


def _aligned(*pairs) -> bool:
    """Every (tensor or None, element strides...) starts on 16 bytes and its strides keep it."""
    for t, *strides in pairs:
        if t is None:
            continue
        es = t.element_size()
        if t.data_ptr() % 16 or any((s * es) % 16 for s in strides):
            return False
    return True


def _strides(t: torch.Tensor | None) -> tuple[int, int]:
    """(batch, token) element strides of a [B, 1 or N, D] operand; 0 for a broadcast token."""
    if t is None:
        return 0, 0
    return t.stride(0), (t.stride(1) if t.shape[1] > 1 else 0)


def config(x, y, gate, scale, weight, bias, out_dtype, flags: int, *rows) -> EpilogueConfig:
    """The configuration of one call: vector loads when D is a whole number of 16-byte words and
    every operand (and the contiguous [B, N, D] tensors in `rows`) keeps 16-byte alignment."""
    named = {"x": x, "y": y, "gate": gate, "scale": scale, "weight": weight, "bias": bias}
    check_rows(x.shape[-1], **{k: t for k, t in named.items() if t is not None})
    vec = 16 // x.element_size()
    vector = x.shape[-1] % vec == 0 and _aligned(
        (x, x.stride(0), x.stride(1)),
        (y, *(() if y is None else (y.stride(0), y.stride(1)))),
        (gate, *_strides(gate)),
        (scale, *_strides(scale)),
        (weight,),
        (bias,),
        *((t,) for t in rows),
    )
    return EpilogueConfig(CTYPE[x.dtype], CTYPE[out_dtype], x.shape[-1], flags, vector)


def _rows_per_cta(N: int, B: int, wave: int) -> int:
    """Rows per CTA: one wave of resident CTAs over the batch (each walks its rows with the next
    row's loads in flight), at least MIN_ROWS_PER_CTA rows each (per-sample operands are loaded
    once per CTA; the backward's partial sums are one row per CTA)."""
    chunks = max(1, min(-(-wave // B), -(-N // MIN_ROWS_PER_CTA)))
    return -(-N // chunks)


def forward(x, y, gate, scale, shift, weight, bias, eps: float, out_dtype, flags: int, tune=None):
    """x, y [B, N, D] (last dim contiguous); gate/scale/shift fp32 [B, 1 or N, D] (scale and
    shift with the same strides); weight/bias fp32 [D]. Returns x_new (RESID; else an empty
    tensor), normed [B, N, D] contiguous, mean (LayerNorm; else empty) and rstd [B, N] fp32.
    tune: lab only, (EpilogueConfig, pass) -> EpilogueConfig, in place of `tuned` (a candidate's
    kernels for this call)."""
    from suite.cuda.launch import f32, i64, launch, ptr

    B, N, D = x.shape
    dev = x.device
    resid, rms = bool(flags & RESID), bool(flags & RMS)
    x_new = torch.empty((B, N, D) if resid else (0,), dtype=x.dtype, device=dev)
    out = torch.empty((B, N, D), dtype=out_dtype, device=dev)
    mean = torch.empty((0,) if rms else (B, N), dtype=torch.float32, device=dev)
    rstd = torch.empty((B, N), dtype=torch.float32, device=dev)
    if B * N == 0:
        return x_new, out, mean, rstd
    cfg = (tune or tuned)(config(x, y, gate, scale, weight, bias, out_dtype, flags), "fwd")
    idx = dev.index
    rpc = _rows_per_cta(N, B, _ctas_per_wave(cfg, cfg.fwd(), idx))
    (sgb, sgn), (smb, smn) = _strides(gate), _strides(scale)
    syb, syn = (y.stride(0), y.stride(1)) if y is not None else (0, 0)
    launch(
        _fn(cfg, cfg.fwd(), idx),
        (-(-N // rpc), B, 1),
        cfg.threads,
        idx,
        [
            ptr(x),
            i64(x.stride(0)),
            i64(x.stride(1)),
            ptr(y),
            i64(syb),
            i64(syn),
            ptr(gate),
            i64(sgb),
            i64(sgn),
            ptr(scale),
            ptr(shift),
            i64(smb),
            i64(smn),
            ptr(weight),
            ptr(bias),
            ptr(x_new if resid else None),
            ptr(out),
            ptr(None if rms else mean),
            ptr(rstd),
            i64(N),
            i64(rpc),
            f32(eps),
        ],
    )
    return x_new, out, mean, rstd


def backward(d_xnew, d_out, xs, y, gate, scale, weight, bias, mean, rstd, flags: int, tune=None):
    """Gradients of forward(): (dx, dy, dgate, dscale, dshift, dweight, dbias), each its own
    tensor (empty where the operand is absent; dy empty without RESID). dgate/dscale/dshift fp32
    [B, N, D] per token, [B, D] per sample; dweight/dbias fp32 [D]. d_xnew, d_out and xs
    contiguous [B, N, D]. tune: as forward's."""
    from suite.cuda.launch import i32, i64, launch, ptr

    B, N, D = xs.shape
    dev = xs.device
    idx = dev.index
    resid = bool(flags & RESID)
    dx = torch.empty((B, N, D), dtype=xs.dtype, device=dev)
    dy = torch.empty((B, N, D) if resid else (0,), dtype=xs.dtype, device=dev)
    cfg = config(xs, y, gate, scale, weight, bias, d_out.dtype, flags, d_out, d_xnew)
    cfg = (tune or tuned)(cfg, "bwd")
    shape = {"gate": (B, D), "scale": (B, D), "shift": (B, D), "weight": (D,), "bias": (D,)}
    alloc = torch.zeros if B * N == 0 else torch.empty  # the finalize writes every column
    sums = {k: alloc(shape[k], dtype=torch.float32, device=dev) for k in cfg.slots}

    def grad(name: str, bit: int, tok: int) -> torch.Tensor:  # a distinct tensor each
        if name in sums:
            return sums[name]
        on = flags & bit and flags & tok
        return torch.empty((B, N, D) if on else (0,), dtype=torch.float32, device=dev)

    dgate, dscale, dshift = (
        grad("gate", GATE, GATE_TOK),
        grad("scale", MOD, MOD_TOK),
        grad("shift", MOD, MOD_TOK),
    )
    dweight, dbias = grad("weight", 0, 0), grad("bias", 0, 0)
    out = dx, dy, dgate, dscale, dshift, dweight, dbias
    if B * N == 0:
        return out
    rpc = _rows_per_cta(N, B, _ctas_per_wave(cfg, cfg.bwd(), idx))
    chunks = -(-N // rpc)
    Q = len(cfg.slots)
    part = torch.empty((B, chunks, Q, D) if Q else (0,), dtype=torch.float32, device=dev)
    (sgb, sgn), (smb, smn) = _strides(gate), _strides(scale)
    syb, syn = (y.stride(0), y.stride(1)) if y is not None else (0, 0)
    tok = [t if t.dim() == 3 else None for t in (dgate, dscale, dshift)]
    launch(
        _fn(cfg, cfg.bwd(), idx),
        (chunks, B, 1),
        cfg.threads,
        idx,
        [
            ptr(xs),
            ptr(y),
            i64(syb),
            i64(syn),
            ptr(gate),
            i64(sgb),
            i64(sgn),
            ptr(scale),
            i64(smb),
            i64(smn),
            ptr(weight),
            ptr(bias),
            ptr(mean if mean.numel() else None),
            ptr(rstd),
            ptr(d_xnew if resid else None),
            ptr(d_out),
            ptr(dx),
            ptr(dy if resid else None),
            *(ptr(t) for t in tok),
            ptr(part if Q else None),
            i64(N),
            i64(rpc),
        ],
    )
    if Q:
        outs = [sums[k] for k in cfg.slots] + [None] * (5 - Q)
        sum_b = sum(1 << q for q, k in enumerate(cfg.slots) if k in ("weight", "bias"))
        launch(
            _fn(cfg, "epilogue_finalize", idx),
            (-(-D // 128), Q, B),
            128,
            idx,
            [ptr(part), *(ptr(o) for o in outs), i32(B), i32(chunks), i32(Q), i32(D), i32(sum_b)],
        )
    return out
