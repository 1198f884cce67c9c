"""lab/quick_sweep_design.py reads C2 the way the costmodel rows do: over the full design of the
H100 full reference it gives back that reference's r_bs2_sweep row, and its first design is the
quick profile's grid."""

from pathlib import Path

import pandas as pd
import pytest

from lab import quick_sweep_design as qsd
from suite.experiments.costmodel.sweep import PROFILES

RUN = Path(__file__).resolve().parents[2] / "reports/reference/h100/full-c2036da"


def test_the_full_design_gives_back_the_references_c2():
    sweep = qsd.read(RUN, "shapes_sweep")
    med = sweep.groupby(["B", "S"])["step_s"].median()
    full = qsd.DESIGNS["full profile (16 buckets, ladder <= 25k)"]
    assert full == set(PROFILES["full"].grid()) == set(med.index)
    row = pd.read_csv(RUN / "metrics.csv").set_index("metric").loc["r_bs2_sweep"]
    assert qsd.c2(med, full) == pytest.approx((row.value, row.ci_low, row.ci_high))


def test_the_first_design_is_the_quick_profiles_grid():
    assert next(iter(qsd.DESIGNS.values())) == set(PROFILES["quick"].grid())
