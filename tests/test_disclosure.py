"""The extrapolation the simulated claims rest on, computed from the run's own tables."""

from pathlib import Path

import pandas as pd
import pytest

from suite.balance.disclosure import extrapolation_factor, extrapolation_text

REF = Path(__file__).resolve().parents[1] / "reports" / "reference" / "h200"


def test_factor_is_largest_simulated_micro_batch_over_largest_measured_shape():
    ranks = pd.DataFrame({"tokens": [1000, 9000, 4000]})
    sweep = pd.DataFrame({"B": [1, 3], "S": [2000, 1000]})
    assert extrapolation_factor(ranks, sweep) == (3.0, 9000, 3000)
    assert extrapolation_text(ranks, sweep).startswith("extrapolation 3.0x: ")
    assert extrapolation_text(ranks.assign(tokens=[10, 20, 30]), sweep).startswith(
        "no extrapolation"
    )


def test_missing_columns_name_the_table():
    with pytest.raises(ValueError, match="sweep: needs .*'B', 'S'"):
        extrapolation_factor(pd.DataFrame({"tokens": [1]}), pd.DataFrame({"S": [1]}))


def test_the_full_reference_simulates_ten_times_its_largest_measured_shape():
    """The issue's 9.4x is M_mem / 75600; the largest micro-batch the simulator costed is larger."""
    res = REF / "full-dd54683" / "results"
    factor, simulated, measured = extrapolation_factor(
        pd.read_csv(res / "balance_ranks.csv.gz"), pd.read_csv(res / "shapes_sweep.csv")
    )
    assert measured == 75600 and simulated == 767400 and factor == pytest.approx(10.15, abs=0.01)
