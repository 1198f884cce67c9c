"""Training data: the corpus (one row per sample: frames, height, width, tokens) and its batches.

The corpus comes from suite.data (seeded synthetic mix, or a user's manifest); TINY_MIX is a mix of
small shapes for the CPU tests and the `tiny` model. A plan's micro-batch of corpus samples becomes
tensors through the one batch builder, suite.model.wan.make_batch: each sample's latent and text
are deterministic per (seed, index), whatever rank, policy or batch it lands in, and its
flow-matching timestep and noise per (seed, index, epoch), epoch = how many times the plan trained
the sample before: every policy trains the same sample with the same noise (common random
numbers, so two policies' losses compare paired), and a sample seen again gets fresh noise. A
sample of (frames, height, width) pixels has the Wan 2.1 VAE latent shape
(16, (F-1)/4+1, H/8, W/8), i.e. S = ((F-1)/4+1) * (H/16) * (W/16) tokens after the (1, 2, 2) patch.
"""

from __future__ import annotations

import pandas as pd

from suite.data.corpus import MIX_COLUMNS, sample_corpus
from suite.data.manifest import read_manifest
from suite.model.wan import Batch, ModelInfo, latent_shape, make_batch

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


def corpus_batch(
    corpus: pd.DataFrame, indices, info: ModelInfo, epochs=None, *, seed: int = 0, device="cpu"
) -> Batch:
    """The samples `indices` of `corpus` (one sequence length: one model batch) as a Batch for a
    model `info` describes, in the first sample's latent shape (two shapes of one S, which is
    rare, have the same number of latent elements)."""
    indices = [int(i) for i in indices]
    if not indices:
        raise ValueError("indices must name at least one corpus sample, got none")
    rows = corpus.iloc[indices]
    if rows.tokens.nunique() != 1:
        raise ValueError(
            f"a batch must hold one sequence length, got tokens {sorted(set(rows.tokens))}"
        )
    first = rows.iloc[0]
    latent = latent_shape(int(first.frames), int(first.height), int(first.width))
    return make_batch(info, indices, latent, epochs, seed=seed, device=device)
