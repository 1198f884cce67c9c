"""A seeded synthetic mixed corpus of images and videos, as a stand-in for the paper's data.

The paper trains on 10 million samples of WebDataset images and Koala-36M videos but publishes no
shape histogram, so the suite uses an assumed mix, stated here as a table. Each row is one kind of
sample: a (height, width) and a range of frame counts (drawn uniformly over the valid 1 + 4k values
in [frames_min, frames_max]) and its share of the samples.

DEFAULT_MIX (stand-in for WebDataset + Koala-36M):
    40% images: 25% at 480x832, 15% at 720x1280
    60% videos of 17-81 frames: 40% at 480x832, 20% at 720x1280
LONG_VIDEO_MIX (worst case for claim C9): 10% images, 90% videos of 65-81 frames, half of them 720p.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from suite.data.geometry import TEMPORAL_STRIDE, tokens_array

MIX_COLUMNS = ["kind", "height", "width", "frames_min", "frames_max", "share"]

DEFAULT_MIX = pd.DataFrame(
    [
        ("image", 480, 832, 1, 1, 0.25),
        ("image", 720, 1280, 1, 1, 0.15),
        ("video", 480, 832, 17, 81, 0.40),
        ("video", 720, 1280, 17, 81, 0.20),
    ],
    columns=MIX_COLUMNS,
)

LONG_VIDEO_MIX = pd.DataFrame(
    [
        ("image", 480, 832, 1, 1, 0.10),
        ("video", 480, 832, 65, 81, 0.45),
        ("video", 720, 1280, 65, 81, 0.45),
    ],
    columns=MIX_COLUMNS,
)

MIXES: dict[str, pd.DataFrame] = {"default": DEFAULT_MIX, "long-video": LONG_VIDEO_MIX}


def get_mix(mix: str | pd.DataFrame) -> pd.DataFrame:
    """A mix table by name ("default", "long-video") or a table with MIX_COLUMNS."""
    if isinstance(mix, pd.DataFrame):
        missing = set(MIX_COLUMNS) - set(mix.columns)
        if missing:
            raise ValueError(f"mix table lacks columns {sorted(missing)}; needs {MIX_COLUMNS}")
        return mix
    if mix not in MIXES:
        raise ValueError(f"unknown mix {mix!r}; accepted: {sorted(MIXES)}")
    return MIXES[mix]


def sample_corpus(n: int, mix: str | pd.DataFrame = "default", seed: int = 0) -> pd.DataFrame:
    """n samples drawn from a mix: columns kind, height, width, frames, tokens. Same seed, same data."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    table = get_mix(mix)
    share = table["share"].to_numpy(float)
    if (share < 0).any() or share.sum() <= 0:
        raise ValueError(f"mix shares must be non-negative with a positive sum, got {share}")
    rng = np.random.default_rng(seed)
    row = rng.choice(len(table), size=n, p=share / share.sum())
    lo = table["frames_min"].to_numpy()[row]
    hi = table["frames_max"].to_numpy()[row]
    # uniform over the valid frame counts 1 + 4k in [lo, hi]
    k_lo = (lo - 1 + TEMPORAL_STRIDE - 1) // TEMPORAL_STRIDE
    k_hi = (hi - 1) // TEMPORAL_STRIDE
    frames = 1 + TEMPORAL_STRIDE * (k_lo + np.floor(rng.random(n) * (k_hi - k_lo + 1)).astype(int))
    h = table["height"].to_numpy()[row]
    w = table["width"].to_numpy()[row]
    return pd.DataFrame(
        {
            "kind": table["kind"].to_numpy()[row],
            "height": h,
            "width": w,
            "frames": frames,
            "tokens": tokens_array(h, w, frames),
        }
    )
