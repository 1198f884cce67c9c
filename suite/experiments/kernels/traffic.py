"""The kernel benchmark's bytes model: the fewest bytes each mode of the AdaLN op must move, the
same for every impl of a row (the experiment's GB/s and its copy-bandwidth fraction divide by it).

    fwd: read x (B*N*D*sx) + write y (B*N*D*sy) + modulation (2*B*D*sm) + stats (8*B*N)
    bwd: read x, dy (B*N*D*(sx+sy)) + write dx (B*N*D*sx) + stats + modulation and its grads
"""

from __future__ import annotations


def bytes_model(op: str, B: int, N: int, D: int, sx: int, sy: int, sm: int = 4) -> int:
    elems, rows = B * N * D, B * N
    if op == "fwd":
        return elems * (sx + sy) + 2 * B * D * sm + 8 * rows
    return elems * (2 * sx + sy) + 8 * rows + 4 * B * D * sm
