"""Occupancy and bytes-in-flight model of the fused AdaLN row kernels on sm_90 (pure Python, no
GPU): the predictions in lab/LOG.md come from here, written before the measurement.

Model (Little's law with a fixed latency): while a row kernel waits on its loads, an SM has
`warps x 32 x bytes loaded per thread before the first use` bytes in flight; with the memory
latency fixed, bandwidth is proportional to that, so a variant's fraction of copy bandwidth is
the default kernel's measured fraction (same D, dtype, N) scaled by the ratio of bytes in flight,
capped at CAP. It ignores barrier and store time (which rows in flight amortize) and the tail
of the grid, so it is a lead, not a promise.
"""

from __future__ import annotations

from dataclasses import dataclass

# sm_90 (H100/H200) per-SM limits
REGS_PER_SM = 65536
REG_ALLOC_UNIT = 256  # registers are allocated per warp in units of 256
MAX_WARPS = 64
MAX_CTAS = 32
SMEM_PER_SM = 228 * 1024
SMEM_PER_CTA_RESERVED = 1024
CAP = 0.95  # no row kernel goes past ~95% of the measured copy bandwidth


@dataclass(frozen=True)
class Occupancy:
    ctas: int
    warps: int
    limit: str  # "registers" | "threads" | "ctas" | "smem"


def occupancy(registers: int, threads: int, smem: int = 0) -> Occupancy:
    """Resident CTAs and warps per SM for a kernel of `registers` per thread and `threads` per CTA."""
    if registers <= 0 or threads <= 0:
        raise ValueError("registers and threads must be positive")
    warps_per_cta = -(-threads // 32)
    per_warp = -(-registers * 32 // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
    limits = {
        "registers": (REGS_PER_SM // per_warp) // warps_per_cta,
        "threads": MAX_WARPS // warps_per_cta,
        "ctas": MAX_CTAS,
        "smem": SMEM_PER_SM // (smem + SMEM_PER_CTA_RESERVED),
    }
    limit = min(limits, key=lambda k: limits[k])
    ctas = limits[limit]
    return Occupancy(ctas, ctas * warps_per_cta, limit)


def bytes_per_thread(op: str, ept: int, vec: int, sx: int, sy: int, rif: int = 1) -> int:
    """Bytes a thread loads from the row tensors before it needs the first of them: forward x
    (rif rows of whole vectors), backward x and dy of one row."""
    elems = max(ept, vec) // vec * vec
    if op == "fwd":
        return rif * elems * sx
    if op == "bwd":
        return elems * (sx + sy)
    raise ValueError(f"op must be 'fwd' or 'bwd', got {op!r}")


def bytes_in_flight(occ: Occupancy, per_thread: int) -> int:
    """Bytes in flight per SM while every resident warp waits on its loads."""
    return occ.warps * 32 * per_thread


def predict_fraction(
    measured_default: float, inflight_default: int, inflight_variant: int
) -> float:
    """Fraction of copy bandwidth predicted for a variant from the default's measured fraction."""
    if inflight_default <= 0:
        raise ValueError("inflight_default must be positive")
    return min(CAP, measured_default * inflight_variant / inflight_default)
