"""lab/dual_gap.py on the committed H200 quick reference: the replay of its own batches and the
spread of short simulated windows (the numbers reports/reference/h200/quick-284a9bc/README.md quotes)."""

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "reports" / "reference" / "h200" / "quick-284a9bc"
_spec = importlib.util.spec_from_file_location("dual_gap", ROOT / "lab" / "dual_gap.py")
dg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dg)


def _truth():
    refits = pd.read_csv(RUN / "validation" / "refits.csv").set_index("model")
    return dg.model_from_quadratic(refits.loc[["refit_quadratic"]], "refit")


def test_replay_of_the_runs_own_batches():
    # measured C8 at this run (s_cross 32400, 6001933's batches): +17.7%; the refit replaying the
    # same batches: +18.4% (141c38e's at 28800: +21.7% measured, +22.6% replayed; 1e9e5e2's at
    # 28800: +21.8% and +22.5%; 47aa441's at 9360: +16.2% and +17.3%; f055e77's at 9360: +12.5%
    # and +12.8%)
    assert dg.replay_gain(RUN / "results", _truth(), "default") == pytest.approx(18.4, abs=0.05)


def test_window_spread_orders_its_percentiles(capsys):
    dg.main(
        [
            str(RUN),
            "--steps",
            "50",
            "--windows",
            "30",
            "--window-s-cross",
            "9360",
            "--below",
            "12.5",
        ]
    )
    out = capsys.readouterr().out
    line = out.strip().splitlines()[-1].split()
    s_cross, windows, steps, p5, p50, p95, below = map(float, line)
    assert (s_cross, windows, steps) == (9360, 30, 8)
    assert p5 <= p50 <= p95 and 0 <= below <= 1
