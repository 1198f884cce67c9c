"""The fused AdaLN op's arguments: validation (dtypes, shapes, devices, options, with errors that
name the argument, what was given and what is accepted) and what the modulation is: per sample,
per token, or two rows of one [B, K, D] table (Wan's chunked modulation), whose gradient the op
writes whole. suite/ops/fused_adaln/op.py calls these once per call signature on the eager CUDA path.
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor

from suite.ops.fused_adaln.reference import MODE_SAMPLE, MODE_TOKEN

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
BACKWARDS = ("fused", "dtile")


def _check(x: Tensor, out_dtype, backward: str, eps: float = 1e-6) -> torch.dtype:
    if not isinstance(x, Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 3:
        raise ValueError(f"x must be [B, N, D], got shape {list(x.shape)}")
    if x.dtype not in DTYPES:
        raise TypeError(f"x must be float32, bfloat16 or float16, got {x.dtype}")
    if backward not in BACKWARDS:
        raise ValueError(f"backward must be one of {BACKWARDS}, got {backward!r}")
    if not (isinstance(eps, (int, float)) and 0 <= eps < float("inf")):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    out_dtype = x.dtype if out_dtype is None else out_dtype
    if out_dtype not in DTYPES:
        raise TypeError(f"out_dtype must be float32, bfloat16 or float16, got {out_dtype}")
    if x.is_cuda:
        from suite.ops.fused_adaln.cuda import check_d

        check_d(x.shape[-1])
    return out_dtype


def _same_device(x: Tensor, **tensors: Tensor) -> None:
    """Every tensor on x's device, checked before any launch: a kernel given a host pointer
    faults (illegal address), and after that every CUDA call of the process fails."""
    for name, t in tensors.items():
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device != x.device:
            raise ValueError(
                f"{name} is on {t.device} but x is on {x.device}: every tensor must be on "
                f"x's device (move it with {name}.to(x.device))"
            )


def _mod_view(t: Tensor, name: str, B: int, N: int, D: int) -> tuple[Tensor, int]:
    """[B, D] / [1, D] / [B, 1, D] -> per-sample [B, D] view; [B, N, D] / [1, N, D] -> per token."""
    if t.dtype not in DTYPES:
        raise TypeError(f"{name} must be float32, bfloat16 or float16, got {t.dtype}")
    given = list(t.shape)
    if t.dim() == 3 and t.shape[1] == 1:
        t = t.squeeze(1)  # a view whose backward is a view: t[:, 0] would cost 2 kernels each
    if t.dim() == 2 and t.shape[-1] == D and t.shape[0] in (1, B):
        return (t if t.shape[0] == B else t.expand(B, D)), MODE_SAMPLE  # stride 0 broadcasts
    if t.dim() == 3 and t.shape[1:] == (N, D) and t.shape[0] in (1, B):
        return (t if t.shape[0] == B else t.expand(B, N, D)), MODE_TOKEN
    raise ValueError(
        f"{name} must be [B, D], [B, 1, D] or [B, N, D] with B={B}, N={N}, D={D}; got {given}"
    )


_table_gradient = [True]


@contextlib.contextmanager
def slice_gradients():
    """Benchmark switch: inside it, scale and shift rows of one table take autograd's slice
    backward (the general path) instead of _EagerAdaLNRows; suite.experiments.kernels.bench's `fused-slices`."""
    prev, _table_gradient[0] = _table_gradient[0], False
    try:
        yield
    finally:
        _table_gradient[0] = prev


def _rows_of_one_table(scale: Tensor, shift: Tensor, B: int, D: int):
    """(table, si, hi) when scale and shift are distinct rows of one [B, K, D] tensor that needs
    a gradient (Wan's e[:, 1:2], e[:, 0:1], or chunk(6, dim=1)), else None. Eager only: under
    torch.compile the slice backward fuses into the compiled graph anyway."""
    table = scale._base
    if (
        table is None
        or not _table_gradient[0]
        or shift._base is not table
        or torch.compiler.is_compiling()
        or not (torch.is_grad_enabled() and scale.requires_grad and shift.requires_grad)
        or table.dim() != 3
        or table.shape[1] > 31  # the finalize's mask of rows to zero is an int
        or table.dtype != scale.dtype
        or table.shape[0] != B
        or table.shape[2] != D
        or table.stride(2) != 1
    ):
        return None
    rows = []
    for t in (scale, shift):
        off = t.storage_offset() - table.storage_offset()
        row, rem = divmod(off, table.stride(1)) if table.stride(1) else (0, 1)
        if (
            rem
            or not 0 <= row < table.shape[1]
            or t.stride(0) != table.stride(0)
            or t.stride(-1) != 1
        ):
            return None
        rows.append(row)
    si, hi = rows
    return (table, si, hi) if si != hi else None


def _table_rows(scale: Tensor, shift: Tensor, B: int, D: int):
    """_rows_of_one_table for a direct call: scale and shift as given ([B, 1, D] or [B, D])."""
    table = scale._base
    if table is None or shift._base is not table or not _table_gradient[0]:
        return None
    if not (scale.requires_grad and shift.requires_grad):
        return None
    t0 = table.storage_offset()
    key = (table.shape, table.stride(), table.dtype, scale.storage_offset() - t0,
           shift.storage_offset() - t0, scale.stride(), B, D)  # fmt: skip
    rows = _rows_cache.get(key, False)
    if rows is False:
        found = _rows_of_one_table(scale, shift, B, D)
        rows = _rows_cache[key] = None if found is None else found[1:]
    return None if rows is None else (table, *rows)


_rows_cache: dict = {}  # (table layout, offsets) -> (si, hi) or None; a few entries per model
