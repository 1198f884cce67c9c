"""The training experiment's runstats on hand-made rank rows: regrouping, per-run step tables,
comparisons."""

import numpy as np
import pandas as pd
import pytest

from suite.experiments.training.runstats import (
    compare,
    paired_runs,
    regroup,
    run_summaries,
    throughput_gain,
)


def _rows(run: str, compute: list[list[float]], B: int = 1) -> pd.DataFrame:
    """One row per (step, rank) of a run whose rank r at step k computed compute[k][r] seconds."""
    world = len(compute[0])
    rows = [
        {"run": run, "step": k, "rank": r, "world": world, "compute_s": c, "optimizer_s": 0.1,
         "collective_wait_s": max(cs) - c, "step_s": max(cs) + 0.1, "tokens": 100 * B, "B": B,
         "S": 100, "samples": B, "loss": 1.0, "peak_mem_bytes": 0, "peak_reserved_bytes": 0,
         "grad_bytes": 8e9, "busbw_gbps": 100.0, "policy": run, "adaln": "wan", "emulated": True}
        for k, cs in enumerate(compute)
        for r, c in enumerate(cs)
    ]  # fmt: skip
    return pd.DataFrame(rows)


def test_regroup_splits_each_step_into_smaller_steps_and_recomposes_them():
    r = regroup(_rows("a", [[1.0, 2.0, 3.0, 4.0]]), 2)
    assert list(r.step) == [0, 0, 1, 1] and list(r["rank"]) == [0, 1, 0, 1]
    coll = 2 * (2 - 1) / 2 * 8e9 / 100e9 + 30e-6  # the ring all-reduce model at 2 ranks
    np.testing.assert_allclose(r.step_s, [2 + coll + 0.1] * 2 + [4 + coll + 0.1] * 2)
    np.testing.assert_allclose(r.collective_wait_s, [1 + coll, coll, 1 + coll, coll])
    assert (regroup(_rows("a", [[1.0, 2.0]]), 1).collective_s == 0).all()
    with pytest.raises(ValueError, match="cannot split 4 ranks into steps of 3"):
        regroup(_rows("a", [[1.0] * 4]), 3)


def test_comparisons_of_two_runs():
    ranks = pd.concat(
        [
            _rows("slow", [[1.0, 3.0], [1.0, 3.0], [1.5, 2.5]]),
            _rows("fast", [[2.0, 2.0], [2.0, 2.0], [2.0, 2.0]]),
        ]
    )
    summ = run_summaries(ranks)
    assert set(summ) == {("slow", 2), ("fast", 2)} and len(summ[("fast", 2)][0]) == 3
    g, lo, hi = compare(summ, ("slow", 2), ("fast", 2), "throughput_gain", paired=True)
    want = 100 * (8.8 / 6.3 - 1)  # the same tokens in 3 x 2.1 s against 3.1 + 3.1 + 2.6 s
    assert g == pytest.approx(want) and lo <= g <= hi
    v, *_ = compare(summ, ("slow", 2), ("fast", 2), "cv_reduction", paired=True)
    assert v == pytest.approx(100.0)  # the fast run's ranks are equal at every step
    assert throughput_gain(summ[("slow", 2)][0], summ[("fast", 2)][0])[0] == pytest.approx(want)
    assert paired_runs(ranks, "slow", "fast")  # the same B and S at every step and rank
    other = _rows("other", [[2.0, 2.0]] * 3, B=2)
    assert not paired_runs(pd.concat([ranks, other]), "slow", "other")
