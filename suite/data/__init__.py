"""Data: Wan 2.1 token geometry, the seeded synthetic corpus, and readers for a user's manifest.

Plain numpy/pandas; importable without torch.
"""

from suite.data.corpus import DEFAULT_MIX, LONG_VIDEO_MIX, MIXES, sample_corpus
from suite.data.geometry import tokens, tokens_array
from suite.data.manifest import ManifestError, read_manifest

__all__ = [
    "DEFAULT_MIX",
    "LONG_VIDEO_MIX",
    "MIXES",
    "ManifestError",
    "read_manifest",
    "sample_corpus",
    "tokens",
    "tokens_array",
]
