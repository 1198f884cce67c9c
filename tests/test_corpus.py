import numpy as np
import pandas as pd
import pytest

from suite.data.corpus import DEFAULT_MIX, LONG_VIDEO_MIX, sample_corpus
from suite.data.geometry import tokens_array


def test_same_seed_same_corpus_other_seed_differs():
    a, b, c = sample_corpus(2000, seed=1), sample_corpus(2000, seed=1), sample_corpus(2000, seed=2)
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(c)


def test_default_mix_proportions_and_ranges():
    c = sample_corpus(40_000, seed=0)
    assert abs((c["kind"] == "image").mean() - 0.40) < 0.01
    vids = c[c["kind"] == "video"]
    assert vids["frames"].min() == 17 and vids["frames"].max() == 81
    assert ((vids["frames"] - 1) % 4 == 0).all()
    assert (c["tokens"] == tokens_array(c["height"], c["width"], c["frames"])).all()
    assert c["tokens"].max() == 75_600 and c["tokens"].min() == 1_560


def test_long_video_mix_is_heavier():
    d = sample_corpus(20_000, DEFAULT_MIX, seed=0)["tokens"].mean()
    w = sample_corpus(20_000, LONG_VIDEO_MIX, seed=0)["tokens"].mean()
    assert w > 1.5 * d
    assert sample_corpus(5000, "long-video")["frames"].max() == 81


def test_unknown_mix_names_the_accepted_ones():
    with pytest.raises(ValueError, match="default"):
        sample_corpus(10, "nope")


def test_frames_cover_all_valid_values():
    f = np.unique(sample_corpus(20_000, seed=3).query("kind == 'video'")["frames"])
    assert f.tolist() == list(range(17, 82, 4))
