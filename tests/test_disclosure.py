"""The extrapolation the simulated claims rest on, computed from the run's own tables."""

from pathlib import Path

import pandas as pd
import pytest

from suite.balance.disclosure import extrapolation_factor, extrapolation_text

REF = Path(__file__).resolve().parents[1] / "reports" / "reference" / "h200"


def test_factor_is_largest_simulated_micro_batch_over_largest_measured_shape():
    # the last row: a micro-batched policy's rank (B = 0), several micro-batches summed
    ranks = pd.DataFrame({"B": [1, 3, 0], "S": [1000, 3000, 0], "tokens": [1000, 9000, 20000]})
    sweep = pd.DataFrame({"B": [1, 3], "S": [2000, 1000]})
    assert extrapolation_factor(ranks, sweep) == (3.0, 9000, 3000)
    assert extrapolation_text(ranks, sweep).startswith("extrapolation 3.0x: ")
    assert extrapolation_text(ranks.assign(S=[10, 20, 0]), sweep).startswith("no extrapolation")


def test_missing_columns_name_the_table():
    with pytest.raises(ValueError, match="sweep: needs .*'B', 'S'"):
        extrapolation_factor(pd.DataFrame({"B": [1], "S": [1]}), pd.DataFrame({"S": [1]}))


def test_the_full_reference_simulates_nine_times_its_largest_measured_shape():
    """About M_mem / 75600: the dual and equal-token micro-batches fill M_mem = 712k tokens."""
    res = REF / "full-dd54683" / "results"
    factor, simulated, measured = extrapolation_factor(
        pd.read_csv(res / "balance_ranks.csv.gz"), pd.read_csv(res / "shapes_sweep.csv")
    )
    assert measured == 75600 and simulated == 711360 and factor == pytest.approx(9.41, abs=0.01)
