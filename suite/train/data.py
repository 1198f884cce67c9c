"""Synthetic training data: one latent video and one text embedding per corpus sample.

Every sample is deterministic per (seed, index): a generator seeded with both draws it, so the
same index gives the same tensors whatever rank, policy or batch it lands in. Its flow-matching
timestep and noise are deterministic per (seed, index, epoch), epoch = how many times the plan
trained the sample before: every policy trains the same sample with the same noise (common random
numbers, so two policies' losses compare paired), and a sample seen again gets fresh noise. A sample of
(frames, height, width) pixels has the Wan 2.1 VAE latent shape (16, (F-1)/4+1, H/8, W/8), i.e.
S = ((F-1)/4+1) * (H/16) * (W/16) tokens after the (1, 2, 2) patch.

The corpus comes from suite.data (seeded synthetic mix, or a user's manifest); TINY_MIX is a mix of
small shapes for the CPU tests and the `tiny` model.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from suite.data.corpus import MIX_COLUMNS, sample_corpus
from suite.data.manifest import read_manifest

LATENT_CHANNELS = 16

# (kind, height, width, frames_min, frames_max, share): S from 4 to 320 tokens
TINY_MIX = pd.DataFrame(
    [
        ("image", 32, 32, 1, 1, 0.30),
        ("image", 64, 64, 1, 1, 0.20),
        ("video", 64, 64, 5, 17, 0.35),
        ("video", 128, 128, 9, 17, 0.15),
    ],
    columns=MIX_COLUMNS,
)


def latent_shape(frames: int, height: int, width: int) -> tuple[int, int, int, int]:
    if (frames - 1) % 4 or height % 16 or width % 16:
        raise ValueError(
            f"(frames, height, width) must be (1 + 4k, 16m, 16n), got {(frames, height, width)}"
        )
    return (LATENT_CHANNELS, (frames - 1) // 4 + 1, height // 8, width // 8)


def load_corpus(
    n: int, mix: str | pd.DataFrame = "default", seed: int = 0, manifest: str | None = None
) -> pd.DataFrame:
    """Columns frames, height, width, tokens (one row per sample)."""
    if manifest:
        df = read_manifest(manifest)
        if "frames" not in df.columns:
            df["frames"] = 1
        return df
    return sample_corpus(n, TINY_MIX if isinstance(mix, str) and mix == "tiny" else mix, seed=seed)


def _generator(device: torch.device, seed: int, index: int) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed((int(seed) * 1_000_003 + int(index)) % (2**63 - 1))
    return g


def sample_noise(
    indices, epochs, shape, *, seed: int = 0, device="cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """(t [B] in [0, 1), eps [B, *shape]) fp32, sample by sample from (seed, index, epoch)."""
    device = torch.device(device)
    ts, eps = [], []
    for i, e in zip(indices, epochs):
        key = np.random.SeedSequence([int(seed), int(i), int(e), 0x6E6F697365])  # "noise"
        g = torch.Generator(device=device)
        g.manual_seed(int(key.generate_state(1, np.uint64)[0]) >> 1)
        ts.append(torch.rand(1, generator=g, device=device))
        eps.append(torch.randn(tuple(shape), generator=g, device=device))
    return torch.cat(ts), torch.stack(eps)


def sample_tensors(
    index: int,
    frames: int,
    height: int,
    width: int,
    *,
    text_len: int,
    text_dim: int,
    seed: int = 0,
    device="cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """(latent [16, T, H/8, W/8], text [text_len, text_dim]) for one sample, fp32, deterministic."""
    device = torch.device(device)
    g = _generator(device, seed, index)
    x0 = torch.randn(latent_shape(frames, height, width), generator=g, device=device)
    text = torch.randn((text_len, text_dim), generator=g, device=device)
    return x0, text


def make_batch(
    corpus: pd.DataFrame, indices, *, text_len: int, text_dim: int, seed: int = 0, device="cpu"
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Stack the samples of one bucket batch: (x0 [B, 16, T, h, w], text [B, L, text_dim], info).

    A bucket holds one sequence length S; two shapes with the same S (rare) have the same number of
    latent elements, and the later ones are viewed in the first one's shape.
    """
    indices = [int(i) for i in indices]
    if not indices:
        raise ValueError("make_batch needs at least one index")
    rows = corpus.iloc[indices]
    if rows.tokens.nunique() != 1:
        raise ValueError(
            f"a batch must hold one sequence length, got tokens {sorted(set(rows.tokens))}"
        )
    xs, ts = [], []
    first = latent_shape(
        int(rows.frames.iloc[0]), int(rows.height.iloc[0]), int(rows.width.iloc[0])
    )
    for i, r in zip(indices, rows.itertuples()):
        x0, t = sample_tensors(
            i,
            int(r.frames),
            int(r.height),
            int(r.width),
            text_len=text_len,
            text_dim=text_dim,
            seed=seed,
            device=device,
        )
        xs.append(x0.reshape(first))
        ts.append(t)
    S = int(np.prod(first[1:])) // 4
    info = {"B": len(indices), "S": S, "tokens": int(rows.tokens.sum()), "shape": list(first)}
    return torch.stack(xs), torch.stack(ts), info
