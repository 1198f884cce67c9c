import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from suite.data.geometry import check_shape, tokens, tokens_array


@pytest.mark.parametrize(
    "h,w,f,expected",
    [(480, 832, 81, 32_760), (720, 1280, 81, 75_600), (480, 832, 1, 1_560), (480, 832, 17, 7_800)],
)
def test_wan_token_counts(h, w, f, expected):
    assert tokens(h, w, f) == expected


@pytest.mark.parametrize(
    "h,w,f,needle",
    [
        (481, 832, 1, "multiples of 16"),
        (480, 830, 1, "multiples of 16"),
        (480, 832, 80, r"1 \+ 4k"),
        (0, 832, 1, "positive"),
        (480, 832, 2.5, "positive integer"),
    ],
)
def test_bad_shapes_name_the_problem(h, w, f, needle):
    with pytest.raises(ValueError, match=needle):
        check_shape(h, w, f)


@given(
    st.lists(
        st.tuples(st.integers(1, 90), st.integers(1, 90), st.integers(0, 30)),
        min_size=1,
        max_size=20,
    )
)
def test_vectorised_matches_scalar(shapes):
    h = np.array([a * 16 for a, _, _ in shapes])
    w = np.array([b * 16 for _, b, _ in shapes])
    f = np.array([1 + 4 * k for *_, k in shapes])
    assert tokens_array(h, w, f).tolist() == [tokens(*x) for x in zip(h, w, f)]


def test_vectorised_raises_on_first_bad_row():
    with pytest.raises(ValueError, match="got 480x833"):
        tokens_array([480, 480], [832, 833], [1, 1])
