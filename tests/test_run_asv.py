"""The asv regression gate: a slowdown beyond the threshold and outside the noise fails."""

from benchmarks.run_asv import _param_combos, regressions


def test_param_combos_match_asv_names():
    assert _param_combos([["64", "1024"], ["'dual'"]]) == ["[64, 'dual']", "[1024, 'dual']"]
    assert _param_combos([]) == [""]


def test_time_regression_needs_ratio_and_separated_intervals():
    base = {"b.S.time_x": (0.10, 0.09, 0.11), "b.S.time_noisy": (0.25, 0.20, 0.30)}
    head = {"b.S.time_x": (0.15, 0.14, 0.16), "b.S.time_noisy": (0.35, 0.25, 0.45)}
    bad = regressions(base, head, 1.10)
    assert len(bad) == 1 and "time_x" in bad[0]


def test_track_direction_by_name():
    base = {"k.F.track_fwd_gbps": (3000.0, 3000.0, 3000.0), "k.F.track_peak_mem_mib": (100.0,) * 3}
    head = {"k.F.track_fwd_gbps": (2000.0, 2000.0, 2000.0), "k.F.track_peak_mem_mib": (90.0,) * 3}
    bad = regressions(base, head, 1.10)
    assert len(bad) == 1 and "gbps" in bad[0]  # lower GB/s is worse; lower memory is better
