"""Wan 2.1 token geometry: latent tokens per sample after the VAE and patchify.

The VAE compresses by (4, 8, 8) in (frames, height, width) and the DiT patchifies by (1, 2, 2), so
    S = ((F - 1) / 4 + 1) * (H / 16) * (W / 16).
81 frames at 480x832 give 32,760 tokens; 81 at 720x1280 give 75,600; one 480x832 image gives 1,560.
"""

from __future__ import annotations

import numpy as np

TEMPORAL_STRIDE = 4  # VAE frames per latent frame (after the first)
SPATIAL_STRIDE = 16  # VAE stride 8 x patch 2


def check_shape(height: int, width: int, frames: int) -> None:
    """Raise ValueError naming what is wrong unless (H, W, F) is a valid Wan 2.1 input shape."""
    for name, v in (("height", height), ("width", width), ("frames", frames)):
        if int(v) != v or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if height % SPATIAL_STRIDE or width % SPATIAL_STRIDE:
        raise ValueError(
            f"height and width must be multiples of {SPATIAL_STRIDE} (VAE 8 x patch 2), "
            f"got {height}x{width}"
        )
    if (frames - 1) % TEMPORAL_STRIDE:
        raise ValueError(f"frames must be 1 + 4k (1 for an image, 17, 21, ..., 81), got {frames}")


def tokens(height: int, width: int, frames: int = 1) -> int:
    """Latent tokens S of one sample; frames=1 is an image."""
    check_shape(height, width, frames)
    t = (frames - 1) // TEMPORAL_STRIDE + 1
    return int(t * (height // SPATIAL_STRIDE) * (width // SPATIAL_STRIDE))


def tokens_array(height, width, frames) -> np.ndarray:
    """Vectorised `tokens` over arrays; raises ValueError naming the first bad index."""
    h, w, f = (np.asarray(x) for x in (height, width, frames))
    h, w, f = np.broadcast_arrays(h, w, f)
    bad = (
        (h < 1)
        | (w < 1)
        | (f < 1)
        | (h % SPATIAL_STRIDE != 0)
        | (w % SPATIAL_STRIDE != 0)
        | ((f - 1) % TEMPORAL_STRIDE != 0)
    )
    if bad.any():
        i = int(np.flatnonzero(bad.ravel())[0])
        check_shape(int(h.ravel()[i]), int(w.ravel()[i]), int(f.ravel()[i]))  # raises with detail
    t = (f.astype(np.int64) - 1) // TEMPORAL_STRIDE + 1
    return t * (h.astype(np.int64) // SPATIAL_STRIDE) * (w.astype(np.int64) // SPATIAL_STRIDE)
